! The bellows Fortran module: Fortran 2008 with ISO_C_BINDING over the C API (bellows/bellows_c.h); the calls of
! the C API with Fortran arrays. docs/c_api.md is the guide.
!
! Array order. The C API describes tensors in C (row-major) order. A Fortran array is column-major, so an
! array a(d1, d2) holds exactly the memory of a C tensor of shape [d2, d1]: this module passes Fortran arrays
! as they are and reverses the shape, with no copy. Put the sample index LAST in Fortran:
!   context(7, n)   is the C block x [n, 7]        (n samples of 7 context values)
!   fine(256, n)    is the C block y [n, 256]
!   samples(256, n) receives the ddpm's prediction [n, 256]; samples(256, k, n) the prediction [n, k, 256]
!
! Errors. Every routine has an integer `status` argument (intent(out)): BELLOWS_OK (0) or a code below;
! bellows_error_message() returns the message of the calling thread's last failed call.
!
!   use bellows
!   type(bellows_trainer) :: t
!   integer :: status
!   call bellows_create(t, "online.yaml", status)
!   if (status /= BELLOWS_OK) print *, bellows_error_message()
!   call bellows_push_block(t, context, fine, status)          ! every model step
!   call bellows_train_async(t, 3840_int64, status)            ! every 48 steps; the model goes on
!   call bellows_wait(t, status)
!   call bellows_predict(t, context, samples, status)
!   call bellows_destroy(t, status)
module bellows
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: int64, real64
  implicit none
  private

  integer, parameter, public :: BELLOWS_OK = 0, BELLOWS_ERR_INTERNAL = 1, BELLOWS_ERR_USAGE = 2, &
                                BELLOWS_ERR_CONFIG = 3, BELLOWS_ERR_DATA = 4, BELLOWS_ERR_RESOURCE = 5, &
                                BELLOWS_ERR_BUSY = 6, BELLOWS_NOT_READY = 7, BELLOWS_RUNNING = 8
  integer, parameter, public :: BELLOWS_C_API_VERSION = 100

  integer(c_int32_t), parameter :: FLOAT32 = 0, FLOAT64 = 1
  integer, parameter :: MAX_DIMS = 8

  ! A trainer: the C handle. Default-initialised to "none".
  type, public :: bellows_trainer
    type(c_ptr) :: handle = c_null_ptr
  end type

  ! The latest numbers (bellows_metrics in C).
  type, bind(c), public :: bellows_metrics
    integer(c_int64_t) :: step = 0
    integer(c_int64_t) :: sessions = 0
    real(c_double) :: loss = 0
    real(c_double) :: learning_rate = 0
    real(c_double) :: samples_per_second = 0
    integer(c_int64_t) :: buffered = 0
    integer(c_int64_t) :: pushed = 0
    integer(c_int64_t) :: dropped = 0
    integer(c_int64_t) :: taken = 0
    integer(c_int32_t) :: training = 0
  end type

  type, bind(c) :: c_tensor
    type(c_ptr) :: name = c_null_ptr
    type(c_ptr) :: data = c_null_ptr
    integer(c_int32_t) :: dtype = 0
    integer(c_int32_t) :: ndim = 0
    integer(c_int64_t) :: shape(MAX_DIMS) = 0
  end type

  type, bind(c) :: c_predict_options
    integer(c_int64_t) :: samples
    integer(c_int64_t) :: seed
    integer(c_int64_t) :: first_index
    integer(c_int64_t) :: steps
    real(c_double) :: eta
    integer(c_int32_t) :: ema
  end type

  ! The names of the pushed tensors: inputs "x", targets "y".
  character(kind=c_char), target :: name_x(2) = [character(kind=c_char) :: 'x', c_null_char]
  character(kind=c_char), target :: name_y(2) = [character(kind=c_char) :: 'y', c_null_char]

  public :: bellows_create, bellows_create_from_string, bellows_destroy
  public :: bellows_push, bellows_push_block, bellows_buffered
  public :: bellows_train, bellows_train_async, bellows_poll, bellows_wait
  public :: bellows_predict, bellows_save, bellows_restore, bellows_get_metrics, bellows_run_dir
  public :: bellows_error_message, bellows_version, bellows_api_version

  ! One sample (x(features), y(values)) or a block (x(features, n), y(values, n)), single or double precision.
  interface bellows_push
    module procedure push_sample_real32, push_sample_real64
  end interface
  interface bellows_push_block
    module procedure push_block_real32, push_block_real64
  end interface
  ! Predictions for context(features, rows): out(values, rows), or out(values, samples, rows) with nsamples > 1.
  interface bellows_predict
    module procedure predict_rank2, predict_rank3
  end interface

  interface
    function c_version() bind(c, name="bellows_version") result(p)
      import :: c_ptr
      type(c_ptr) :: p
    end function
    function c_api_version() bind(c, name="bellows_api_version") result(v)
      import :: c_int
      integer(c_int) :: v
    end function
    function c_last_error() bind(c, name="bellows_last_error") result(p)
      import :: c_ptr
      type(c_ptr) :: p
    end function
    function c_strlen(s) bind(c, name="strlen") result(n)
      import :: c_ptr, c_size_t
      type(c_ptr), value :: s
      integer(c_size_t) :: n
    end function
    function c_create(path, overrides, n, out) bind(c, name="bellows_create") result(s)
      import :: c_char, c_ptr, c_int, c_int32_t
      character(kind=c_char), intent(in) :: path(*)
      type(c_ptr), value :: overrides
      integer(c_int32_t), value :: n
      type(c_ptr), intent(out) :: out
      integer(c_int) :: s
    end function
    function c_create_from_string(yaml, overrides, n, out) bind(c, name="bellows_create_from_string") result(s)
      import :: c_char, c_ptr, c_int, c_int32_t
      character(kind=c_char), intent(in) :: yaml(*)
      type(c_ptr), value :: overrides
      integer(c_int32_t), value :: n
      type(c_ptr), intent(out) :: out
      integer(c_int) :: s
    end function
    function c_destroy(t) bind(c, name="bellows_destroy") result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: t
      integer(c_int) :: s
    end function
    function c_push(t, tensors, count) bind(c, name="bellows_push") result(s)
      import :: c_ptr, c_int, c_int32_t, c_tensor
      type(c_ptr), value :: t
      type(c_tensor), intent(in) :: tensors(*)
      integer(c_int32_t), value :: count
      integer(c_int) :: s
    end function
    function c_push_block(t, tensors, count) bind(c, name="bellows_push_block") result(s)
      import :: c_ptr, c_int, c_int32_t, c_tensor
      type(c_ptr), value :: t
      type(c_tensor), intent(in) :: tensors(*)
      integer(c_int32_t), value :: count
      integer(c_int) :: s
    end function
    function c_buffered(t, n) bind(c, name="bellows_buffered") result(s)
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: t
      integer(c_int64_t), intent(out) :: n
      integer(c_int) :: s
    end function
    function c_train(t, n) bind(c, name="bellows_train") result(s)
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: t
      integer(c_int64_t), value :: n
      integer(c_int) :: s
    end function
    function c_train_async(t, n) bind(c, name="bellows_train_async") result(s)
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: t
      integer(c_int64_t), value :: n
      integer(c_int) :: s
    end function
    function c_poll(t) bind(c, name="bellows_poll") result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: t
      integer(c_int) :: s
    end function
    function c_wait(t) bind(c, name="bellows_wait") result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: t
      integer(c_int) :: s
    end function
    subroutine c_predict_options_init(o) bind(c, name="bellows_predict_options_init")
      import :: c_predict_options
      type(c_predict_options), intent(out) :: o
    end subroutine
    function c_predict(t, input, output, capacity, options) bind(c, name="bellows_predict") result(s)
      import :: c_ptr, c_int, c_int64_t, c_tensor, c_predict_options
      type(c_ptr), value :: t
      type(c_tensor), intent(in) :: input
      type(c_tensor), intent(inout) :: output
      integer(c_int64_t), value :: capacity
      type(c_predict_options), intent(in) :: options
      integer(c_int) :: s
    end function
    function c_save(t, path, capacity) bind(c, name="bellows_save") result(s)
      import :: c_ptr, c_int, c_char, c_size_t
      type(c_ptr), value :: t
      character(kind=c_char), intent(out) :: path(*)
      integer(c_size_t), value :: capacity
      integer(c_int) :: s
    end function
    function c_restore(t, path) bind(c, name="bellows_restore") result(s)
      import :: c_ptr, c_int, c_char
      type(c_ptr), value :: t
      character(kind=c_char), intent(in) :: path(*)
      integer(c_int) :: s
    end function
    function c_metrics(t, m) bind(c, name="bellows_metrics_get") result(s)
      import :: c_ptr, c_int, bellows_metrics
      type(c_ptr), value :: t
      type(bellows_metrics), intent(out) :: m
      integer(c_int) :: s
    end function
    function c_run_dir(t, path, capacity) bind(c, name="bellows_run_dir") result(s)
      import :: c_ptr, c_int, c_char, c_size_t
      type(c_ptr), value :: t
      character(kind=c_char), intent(out) :: path(*)
      integer(c_size_t), value :: capacity
      integer(c_int) :: s
    end function
  end interface

contains

  ! A C string (NUL-terminated) as a Fortran string.
  function from_c(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer :: n, i
    if (.not. c_associated(p)) then
      s = ""
      return
    end if
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate(character(len=n) :: s)
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function

  ! A NUL-terminated C buffer as a Fortran string (up to the NUL).
  function from_buffer(buf) result(s)
    character(kind=c_char), intent(in) :: buf(:)
    character(len=:), allocatable :: s
    integer :: n, i
    n = 0
    do while (n < size(buf))
      if (buf(n + 1) == c_null_char) exit
      n = n + 1
    end do
    allocate(character(len=n) :: s)
    do i = 1, n
      s(i:i) = buf(i)
    end do
  end function

  ! The message of this thread's last failed call.
  function bellows_error_message() result(message)
    character(len=:), allocatable :: message
    message = from_c(c_last_error())
  end function

  function bellows_version() result(version)
    character(len=:), allocatable :: version
    version = from_c(c_version())
  end function

  integer function bellows_api_version()
    bellows_api_version = int(c_api_version())
  end function

  ! "key=value" overrides as NUL-terminated strings in one pool, with a pointer to each.
  subroutine pack_overrides(overrides, pool, pointers)
    character(len=*), intent(in) :: overrides(:)
    character(kind=c_char), allocatable, target, intent(out) :: pool(:)
    type(c_ptr), allocatable, target, intent(out) :: pointers(:)
    integer :: i, j, at, total
    total = 0
    do i = 1, size(overrides)
      total = total + len_trim(overrides(i)) + 1
    end do
    allocate(pool(max(total, 1)), pointers(max(size(overrides), 1)))
    at = 1
    do i = 1, size(overrides)
      pointers(i) = c_loc(pool(at))
      do j = 1, len_trim(overrides(i))
        pool(at) = overrides(i)(j:j)
        at = at + 1
      end do
      pool(at) = c_null_char
      at = at + 1
    end do
  end subroutine

  ! A trainer from a YAML config file, with optional "key=value" overrides (e.g. "data.batch_size=16").
  subroutine bellows_create(trainer, config_path, status, overrides)
    type(bellows_trainer), intent(out) :: trainer
    character(len=*), intent(in) :: config_path
    integer, intent(out) :: status
    character(len=*), intent(in), optional :: overrides(:)
    character(kind=c_char), allocatable, target :: pool(:)
    type(c_ptr), allocatable, target :: pointers(:)
    integer(c_int32_t) :: n
    n = 0
    if (present(overrides)) then
      call pack_overrides(overrides, pool, pointers)
      n = int(size(overrides), c_int32_t)
      status = int(c_create(trim(config_path) // c_null_char, c_loc(pointers), n, trainer%handle))
    else
      status = int(c_create(trim(config_path) // c_null_char, c_null_ptr, n, trainer%handle))
    end if
  end subroutine

  ! The same from YAML text (lines separated by new_line('a')).
  subroutine bellows_create_from_string(trainer, yaml, status, overrides)
    type(bellows_trainer), intent(out) :: trainer
    character(len=*), intent(in) :: yaml
    integer, intent(out) :: status
    character(len=*), intent(in), optional :: overrides(:)
    character(kind=c_char), allocatable, target :: pool(:)
    type(c_ptr), allocatable, target :: pointers(:)
    integer(c_int32_t) :: n
    n = 0
    if (present(overrides)) then
      call pack_overrides(overrides, pool, pointers)
      n = int(size(overrides), c_int32_t)
      status = int(c_create_from_string(yaml // c_null_char, c_loc(pointers), n, trainer%handle))
    else
      status = int(c_create_from_string(yaml // c_null_char, c_null_ptr, n, trainer%handle))
    end if
  end subroutine

  ! Stops a running session at its next step, waits for it, frees the trainer; trainer%handle becomes null.
  subroutine bellows_destroy(trainer, status)
    type(bellows_trainer), intent(inout) :: trainer
    integer, intent(out) :: status
    status = int(c_destroy(trainer%handle))
    if (status == BELLOWS_OK) trainer%handle = c_null_ptr
  end subroutine

  ! A C tensor over a Fortran array's memory: the shape reversed (see the top of this file).
  function describe(name, data, dtype, fortran_shape) result(t)
    type(c_ptr), intent(in) :: name, data
    integer(c_int32_t), intent(in) :: dtype
    integer, intent(in) :: fortran_shape(:)
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
  integer function push_xy(trainer, x, x_shape, y, y_shape, dtype, block) result(status)
    type(bellows_trainer), intent(in) :: trainer
    type(c_ptr), intent(in) :: x, y
    integer, intent(in) :: x_shape(:), y_shape(:)
    integer(c_int32_t), intent(in) :: dtype
    logical, intent(in) :: block
    type(c_tensor) :: tensors(2)
    tensors(1) = describe(c_loc(name_x), x, dtype, x_shape)
    tensors(2) = describe(c_loc(name_y), y, dtype, y_shape)
    if (block) then
      status = int(c_push_block(trainer%handle, tensors, 2_c_int32_t))
    else
      status = int(c_push(trainer%handle, tensors, 2_c_int32_t))
    end if
  end function

  ! (Fortran has no generics over kinds and ranks: one short wrapper per kind and rank.)
  subroutine push_sample_real32(trainer, x, y, status)
    type(bellows_trainer), intent(in) :: trainer
    real(c_float), intent(in), target, contiguous :: x(:), y(:)
    integer, intent(out) :: status
    status = push_xy(trainer, c_loc(x), shape(x), c_loc(y), shape(y), FLOAT32, .false.)
  end subroutine

  subroutine push_sample_real64(trainer, x, y, status)
    type(bellows_trainer), intent(in) :: trainer
    real(c_double), intent(in), target, contiguous :: x(:), y(:)
    integer, intent(out) :: status
    status = push_xy(trainer, c_loc(x), shape(x), c_loc(y), shape(y), FLOAT64, .false.)
  end subroutine

  ! x(features, n), y(values, n): n samples (the C blocks x [n, features], y [n, values]).
  subroutine push_block_real32(trainer, x, y, status)
    type(bellows_trainer), intent(in) :: trainer
    real(c_float), intent(in), target, contiguous :: x(:, :), y(:, :)
    integer, intent(out) :: status
    status = push_xy(trainer, c_loc(x), shape(x), c_loc(y), shape(y), FLOAT32, .true.)
  end subroutine

  subroutine push_block_real64(trainer, x, y, status)
    type(bellows_trainer), intent(in) :: trainer
    real(c_double), intent(in), target, contiguous :: x(:, :), y(:, :)
    integer, intent(out) :: status
    status = push_xy(trainer, c_loc(x), shape(x), c_loc(y), shape(y), FLOAT64, .true.)
  end subroutine

  subroutine bellows_buffered(trainer, samples, status)
    type(bellows_trainer), intent(in) :: trainer
    integer(int64), intent(out) :: samples
    integer, intent(out) :: status
    integer(c_int64_t) :: n
    n = 0
    status = int(c_buffered(trainer%handle, n))
    samples = int(n, int64)
  end subroutine

  ! A session when at least min_samples are buffered (0: data.stream.ready_samples), else BELLOWS_NOT_READY.
  subroutine bellows_train(trainer, min_samples, status)
    type(bellows_trainer), intent(in) :: trainer
    integer(int64), intent(in) :: min_samples
    integer, intent(out) :: status
    status = int(c_train(trainer%handle, int(min_samples, c_int64_t)))
  end subroutine

  subroutine bellows_train_async(trainer, min_samples, status)
    type(bellows_trainer), intent(in) :: trainer
    integer(int64), intent(in) :: min_samples
    integer, intent(out) :: status
    status = int(c_train_async(trainer%handle, int(min_samples, c_int64_t)))
  end subroutine

  ! status: BELLOWS_RUNNING while the background session runs, BELLOWS_OK when none does.
  subroutine bellows_poll(trainer, status)
    type(bellows_trainer), intent(in) :: trainer
    integer, intent(out) :: status
    status = int(c_poll(trainer%handle))
  end subroutine

  subroutine bellows_wait(trainer, status)
    type(bellows_trainer), intent(in) :: trainer
    integer, intent(out) :: status
    status = int(c_wait(trainer%handle))
  end subroutine

  function predict_options(nsamples, seed, steps, eta, ema) result(o)
    integer, intent(in), optional :: nsamples, steps
    integer(int64), intent(in), optional :: seed
    real(real64), intent(in), optional :: eta
    logical, intent(in), optional :: ema
    type(c_predict_options) :: o
    call c_predict_options_init(o)
    if (present(nsamples)) o%samples = int(nsamples, c_int64_t)
    if (present(seed)) o%seed = int(seed, c_int64_t)
    if (present(steps)) o%steps = int(steps, c_int64_t)
    if (present(eta)) o%eta = real(eta, c_double)
    if (present(ema)) then
      o%ema = 0
      if (ema) o%ema = 1
    end if
  end function

  integer function predict_into(trainer, context, context_shape, out, out_shape, options) result(status)
    type(bellows_trainer), intent(in) :: trainer
    type(c_ptr), intent(in) :: context, out
    integer, intent(in) :: context_shape(:), out_shape(:)
    type(c_predict_options), intent(in) :: options
    type(c_tensor) :: input, output
    input = describe(c_null_ptr, context, FLOAT32, context_shape)
    output = describe(c_null_ptr, out, FLOAT32, out_shape)
    status = int(c_predict(trainer%handle, input, output, int(product(out_shape), c_int64_t), options))
  end function

  ! context(features, rows) -> out(values, rows): one ddpm sample per row (or the model's outputs).
  ! ema absent: the EMA weights when the run has them.
  subroutine predict_rank2(trainer, context, out, status, seed, steps, eta, ema)
    type(bellows_trainer), intent(in) :: trainer
    real(c_float), intent(in), target, contiguous :: context(:, :)
    real(c_float), intent(out), target, contiguous :: out(:, :)
    integer, intent(out) :: status
    integer(int64), intent(in), optional :: seed
    integer, intent(in), optional :: steps
    real(real64), intent(in), optional :: eta
    logical, intent(in), optional :: ema
    status = predict_into(trainer, c_loc(context), shape(context), c_loc(out), shape(out), &
                          predict_options(1, seed, steps, eta, ema))
  end subroutine

  ! context(features, rows) -> out(values, nsamples, rows): nsamples ddpm draws per row.
  subroutine predict_rank3(trainer, context, out, status, seed, steps, eta, ema)
    type(bellows_trainer), intent(in) :: trainer
    real(c_float), intent(in), target, contiguous :: context(:, :)
    real(c_float), intent(out), target, contiguous :: out(:, :, :)
    integer, intent(out) :: status
    integer(int64), intent(in), optional :: seed
    integer, intent(in), optional :: steps
    real(real64), intent(in), optional :: eta
    logical, intent(in), optional :: ema
    status = predict_into(trainer, c_loc(context), shape(context), c_loc(out), shape(out), &
                          predict_options(size(out, 2), seed, steps, eta, ema))
  end subroutine

  ! A checkpoint now; path (optional) receives its directory.
  subroutine bellows_save(trainer, status, path)
    type(bellows_trainer), intent(in) :: trainer
    integer, intent(out) :: status
    character(len=:), allocatable, intent(out), optional :: path
    character(kind=c_char) :: buffer(4096)
    buffer = c_null_char
    status = int(c_save(trainer%handle, buffer, int(size(buffer), c_size_t)))
    if (present(path)) path = from_buffer(buffer)
  end subroutine

  ! A checkpoint (step-* directory), a checkpoints/ directory or a run directory (its newest valid checkpoint).
  subroutine bellows_restore(trainer, path, status)
    type(bellows_trainer), intent(in) :: trainer
    character(len=*), intent(in) :: path
    integer, intent(out) :: status
    status = int(c_restore(trainer%handle, trim(path) // c_null_char))
  end subroutine

  subroutine bellows_get_metrics(trainer, metrics, status)
    type(bellows_trainer), intent(in) :: trainer
    type(bellows_metrics), intent(out) :: metrics
    integer, intent(out) :: status
    status = int(c_metrics(trainer%handle, metrics))
  end subroutine

  subroutine bellows_run_dir(trainer, path, status)
    type(bellows_trainer), intent(in) :: trainer
    character(len=:), allocatable, intent(out) :: path
    integer, intent(out) :: status
    character(kind=c_char) :: buffer(4096)
    buffer = c_null_char
    status = int(c_run_dir(trainer%handle, buffer, int(size(buffer), c_size_t)))
    path = from_buffer(buffer)
  end subroutine

end module bellows
