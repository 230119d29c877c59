! The work shared by the module bellows' specific procedures (bellows.f90): Fortran has no generics over kinds and
! ranks, so bellows has one specific per combination, each a few lines over one helper here (creates, pushes, the
! buffered count, predictions). Programs `use bellows`.
module bellows_c_calls
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: int64, real64
  use bellows_c_binding
  use bellows_c_conversions, only: fail, bellows_pack_overrides, real_value, optional_integer, to_int32
  implicit none
  private

  public :: create_any, create_job_of, push_xy, buffered_samples, predict_arrays

  ! The names of the pushed tensors: inputs "x", targets "y".
  character(kind=c_char), target :: name_x(2) = [character(kind=c_char) :: 'x', c_null_char]
  character(kind=c_char), target :: name_y(2) = [character(kind=c_char) :: 'y', c_null_char]

contains

  ! --- creates ---------------------------------------------------------------------------------------------------

  ! Every create: the config (a file's path when from_file, else YAML text), the overrides, the job if any.
  subroutine create_any(trainer, text, from_file, status, overrides, job)
    type(bellows_trainer), intent(out) :: trainer
    character(len=*), intent(in) :: text
    logical, intent(in) :: from_file
    integer, intent(out) :: status
    character(len=*), intent(in), optional :: overrides(:)
    type(c_job), intent(in), optional :: job
    character(kind=c_char), allocatable, target :: pool(:)
    type(c_ptr), allocatable, target :: pointers(:)
    type(c_ptr) :: array
    integer(c_int32_t) :: n
    call bellows_pack_overrides(pool, pointers, array, n, overrides)
    if (present(job)) then
      if (from_file) then
        status = int(c_create_job(trim(text) // c_null_char, array, n, job, trainer%handle))
      else
        status = int(c_create_job_from_string(text // c_null_char, array, n, job, trainer%handle))
      end if
    else
      if (from_file) then
        status = int(c_create(trim(text) // c_null_char, array, n, trainer%handle))
      else
        status = int(c_create_from_string(text // c_null_char, array, n, trainer%handle))
      end if
    end if
  end subroutine

  ! rank and size (any integer kind) as int64, then the job's create; call names the public procedure in messages.
  subroutine create_job_of(trainer, text, from_file, call, rank, size, rendezvous, status, overrides, local_rank, local_size)
    type(bellows_trainer), intent(out) :: trainer
    character(len=*), intent(in) :: text, call, rendezvous
    logical, intent(in) :: from_file
    class(*), intent(in) :: rank, size
    integer, intent(out) :: status
    character(len=*), intent(in), optional :: overrides(:)
    class(*), intent(in), optional :: local_rank, local_size
    integer(int64) :: r, n
    status = BELLOWS_OK
    r = 0
    n = 0
    call optional_integer(rank, r, call, 'rank', status)
    call optional_integer(size, n, call, 'size', status)
    if (status /= BELLOWS_OK) return
    call create_job_any(trainer, text, from_file, call, r, n, rendezvous, status, overrides, local_rank, local_size)
  end subroutine

  ! The job's create: this process is rank `rank` of `size` training processes meeting at rendezvous
  ! ("HOST:PORT"); local_rank and local_size (absent: rank and size, every rank on one node) place it on its node.
  subroutine create_job_any(trainer, text, from_file, call, rank, size, rendezvous, status, overrides, &
                            local_rank, local_size)
    type(bellows_trainer), intent(out) :: trainer
    character(len=*), intent(in) :: text, call, rendezvous
    logical, intent(in) :: from_file
    integer(int64), intent(in) :: rank, size
    integer, intent(out) :: status
    character(len=*), intent(in), optional :: overrides(:)
    class(*), intent(in), optional :: local_rank, local_size
    character(kind=c_char), allocatable, target :: address(:)
    type(c_job) :: job
    integer(int64) :: local(2)
    integer :: i
    status = BELLOWS_OK
    local = [rank, size]
    call optional_integer(local_rank, local(1), call, 'local_rank', status)
    call optional_integer(local_size, local(2), call, 'local_size', status)
    call to_int32(rank, job%rank, call, 'rank', status)
    call to_int32(size, job%size, call, 'size', status)
    call to_int32(local(1), job%local_rank, call, 'local_rank', status)
    call to_int32(local(2), job%local_size, call, 'local_size', status)
    if (status /= BELLOWS_OK) return
    allocate(address(len_trim(rendezvous) + 1))
    do i = 1, len_trim(rendezvous)
      address(i) = rendezvous(i:i)
    end do
    address(len_trim(rendezvous) + 1) = c_null_char
    job%rendezvous = c_loc(address)
    call create_any(trainer, text, from_file, status, overrides, job)
  end subroutine

  ! --- pushes ----------------------------------------------------------------------------------------------------

  ! A C tensor over a Fortran array's memory: the shape reversed (see the top of bellows.f90).
  function describe(name, data, dtype, fortran_shape) result(t)
    type(c_ptr), intent(in) :: name, data
    integer(c_int32_t), intent(in) :: dtype
    integer(int64), intent(in) :: fortran_shape(:)
    type(c_tensor) :: t
    integer :: d, n
    n = size(fortran_shape)
    t%name = name
    t%data = data
    t%dtype = dtype
    t%ndim = int(n, c_int32_t)
    do d = 1, n
      t%shape(d) = int(fortran_shape(n + 1 - d), c_int64_t)
    end do
  end function

  ! x and y as the tensors "x" and "y": one sample (block false) or a block of samples.
  integer function push_xy(trainer, x, x_shape, x_dtype, y, y_shape, y_dtype, block) result(status)
    type(bellows_trainer), intent(in) :: trainer
    type(c_ptr), intent(in) :: x, y
    integer(int64), intent(in) :: x_shape(:), y_shape(:)
    integer(c_int32_t), intent(in) :: x_dtype, y_dtype
    logical, intent(in) :: block
    type(c_tensor) :: tensors(2)
    tensors(1) = describe(c_loc(name_x), x, x_dtype, x_shape)
    tensors(2) = describe(c_loc(name_y), y, y_dtype, y_shape)
    if (block) then
      status = int(c_push_block(trainer%handle, tensors, 2_c_int32_t))
    else
      status = int(c_push(trainer%handle, tensors, 2_c_int32_t))
    end if
  end function

  ! Samples in the buffer now (bellows_buffered's specifics give them in the caller's kind).
  integer function buffered_samples(trainer, samples) result(status)
    type(bellows_trainer), intent(in) :: trainer
    integer(int64), intent(out) :: samples
    integer(c_int64_t) :: n
    n = 0
    status = int(c_buffered(trainer%handle, n))
    samples = int(n, int64)
  end function

  ! --- predictions -----------------------------------------------------------------------------------------------

  ! The options of one prediction: options (or the defaults), then the keywords given, then samples from the
  ! output's shape.
  integer function resolve_options(o, samples, options, seed, first_index, steps, eta, ema) result(status)
    type(bellows_predict_options), intent(out) :: o
    integer(int64), intent(in) :: samples
    type(bellows_predict_options), intent(in), optional :: options
    class(*), intent(in), optional :: seed, first_index, steps, eta
    logical, intent(in), optional :: ema
    integer(int64) :: value
    real(real64) :: eta_value
    logical :: ok
    status = BELLOWS_OK
    if (present(options)) then
      o = options
    else
      call c_predict_options_init(o)
    end if
    value = o%seed
    call optional_integer(seed, value, 'bellows_predict', 'seed', status)
    o%seed = value
    value = o%first_index
    call optional_integer(first_index, value, 'bellows_predict', 'first_index', status)
    o%first_index = value
    value = o%steps
    call optional_integer(steps, value, 'bellows_predict', 'steps', status)
    o%steps = value
    if (present(eta) .and. status == BELLOWS_OK) then
      ok = .true.
      eta_value = o%eta
      call real_value(eta, eta_value, ok)
      if (.not. ok) status = fail(BELLOWS_ERR_USAGE, 'bellows_predict: eta is not a number (pass eta=0.5)')
      o%eta = real(eta_value, c_double)
    end if
    if (present(ema)) then
      o%ema = 0
      if (ema) o%ema = 1
    end if
    o%samples = int(samples, c_int64_t)
  end function

  ! The C call: context and out as C tensors, with the resolved options.
  integer function predict_into(trainer, context, context_shape, context_dtype, out, out_shape, out_dtype, options) &
      result(status)
    type(bellows_trainer), intent(in) :: trainer
    type(c_ptr), intent(in) :: context, out
    integer(int64), intent(in) :: context_shape(:), out_shape(:)
    integer(c_int32_t), intent(in) :: context_dtype, out_dtype
    type(bellows_predict_options), intent(in) :: options
    type(c_tensor) :: input, output
    input = describe(c_null_ptr, context, context_dtype, context_shape)
    output = describe(c_null_ptr, out, out_dtype, out_shape)
    status = int(c_predict(trainer%handle, input, output, int(product(out_shape), c_int64_t), options))
  end function

  ! A prediction of context into out (either kind each, out of rank 2 or 3 with samples draws per row): the options
  ! resolved, then the C call.
  subroutine predict_arrays(trainer, context, context_shape, context_dtype, out, out_shape, out_dtype, samples, &
                            status, options, seed, first_index, steps, eta, ema)
    type(bellows_trainer), intent(in) :: trainer
    type(c_ptr), intent(in) :: context, out
    integer(int64), intent(in) :: context_shape(:), out_shape(:), samples
    integer(c_int32_t), intent(in) :: context_dtype, out_dtype
    integer, intent(out) :: status
    type(bellows_predict_options), intent(in), optional :: options
    class(*), intent(in), optional :: seed, first_index, steps, eta
    logical, intent(in), optional :: ema
    type(bellows_predict_options) :: o
    status = resolve_options(o, samples, options, seed, first_index, steps, eta, ema)
    if (status == BELLOWS_OK) status = predict_into(trainer, context, context_shape, context_dtype, out, out_shape, &
                                                    out_dtype, o)
  end subroutine

end module bellows_c_calls
