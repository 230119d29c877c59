! The bellows Fortran module: Fortran 2008 with ISO_C_BINDING over the C API (bellows/bellows_c.h); every call of
! the C API as a procedure of the same name, with Fortran arrays. docs/c_api.md is the guide and has a table of
! every procedure; the module bellows_mpi (bellows_mpi.f90) adds bellows_create_mpi over an MPI communicator.
!
! Argument order, the same in every routine: the trainer first, then its inputs, then its outputs, then the
! integer `status` (intent(out)); optional arguments come after status and are passed by keyword
! (overrides=, options=, seed=, path=, local_rank=, ...):
!   call bellows_restore(t, path, status)              ! path is an input
!   call bellows_run_dir(t, path, status)              ! path is an output
!   call bellows_save(t, status, path=saved)           ! path is an optional output
!
! Kinds. Floating-point arrays are real(c_float) or real(real64) (c_double), in any combination the C API takes;
! integer arguments take the default kind or int64, so literals need no kind suffix: bellows_train(t, 0, status)
! and bellows_train(t, 3840_int64, status) are both fine. Optional numeric keywords (seed=, steps=, eta=,
! local_rank=, ...) take any integer kind (eta any real kind too); another type is BELLOWS_ERR_USAGE.
!
! Array order. The C API describes tensors in C (row-major) order. A Fortran array is column-major, so an
! array a(d1, d2) holds exactly the memory of a C tensor of shape [d2, d1]: this module passes Fortran arrays
! as they are and reverses the shape, with no copy. Put the sample index LAST in Fortran:
!   context(7, n)   is the C block x [n, 7]        (n samples of 7 context values)
!   fine(256, n)    is the C block y [n, 256]
!   samples(256, n) receives the ddpm's prediction [n, 256]; samples(256, k, n) the prediction [n, k, 256]
!
! Errors. status is BELLOWS_OK (0) or a code below; bellows_last_error() returns the message of the calling
! thread's last failed call.
!
!   use bellows
!   type(bellows_trainer) :: t
!   integer :: status
!   call bellows_create(t, "online.yaml", status)
!   if (status /= BELLOWS_OK) print *, bellows_last_error()
!   call bellows_push_block(t, context, fine, status)          ! every model step
!   call bellows_train_async(t, 3840, status)                  ! every 48 steps; the model goes on
!   call bellows_wait(t, status)
!   call bellows_predict(t, context, samples, status, seed=7)
!   call bellows_destroy(t, status)
module bellows
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: int8, int16, int32, int64, real32, real64
  implicit none
  private

  integer, parameter, public :: BELLOWS_OK = 0, BELLOWS_ERR_INTERNAL = 1, BELLOWS_ERR_USAGE = 2, &
                                BELLOWS_ERR_CONFIG = 3, BELLOWS_ERR_DATA = 4, BELLOWS_ERR_RESOURCE = 5, &
                                BELLOWS_ERR_BUSY = 6, BELLOWS_NOT_READY = 7, BELLOWS_RUNNING = 8, &
                                BELLOWS_STARTED_FRESH = 9
  ! The API version of bellows_c.h this module was written for; bellows_api_version() is the library's.
  integer, parameter, public :: BELLOWS_C_API_VERSION = 200

  integer(c_int32_t), parameter :: FLOAT32 = 0, FLOAT64 = 1
  integer, parameter :: MAX_DIMS = 8

  ! A trainer. handle is the C bellows_trainer* (null: none), there for calls into the C API that a program
  ! makes itself.
  type, public :: bellows_trainer
    type(c_ptr) :: handle = c_null_ptr
  end type

  ! The latest numbers (bellows_metrics in C, field by field).
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
    integer(c_int32_t) :: ranks = 0
    real(c_double) :: eval_loss = 0
    real(c_double) :: eval_metric = 0
    integer(c_int64_t) :: rejected = 0
    integer(c_int32_t) :: rank = 0
    integer(c_int32_t) :: restored = 0
  end type

  ! Prediction options (bellows_predict_options in C), initialised to the C defaults: 1 sample, seed 0, full
  ! ancestral sampling, EMA weights when the run has them. bellows_predict sets samples from its output's shape.
  type, bind(c), public :: bellows_predict_options
    integer(c_int64_t) :: samples = 1
    integer(c_int64_t) :: seed = 0          ! C's uint64_t
    integer(c_int64_t) :: first_index = 0
    integer(c_int64_t) :: steps = 0
    real(c_double) :: eta = 0
    integer(c_int32_t) :: ema = -1
  end type

  type, bind(c) :: c_tensor
    type(c_ptr) :: name = c_null_ptr
    type(c_ptr) :: data = c_null_ptr
    integer(c_int32_t) :: dtype = 0
    integer(c_int32_t) :: ndim = 0
    integer(c_int64_t) :: shape(MAX_DIMS) = 0
  end type

  ! bellows_job in C.
  type, bind(c) :: c_job
    integer(c_int32_t) :: rank = 0
    integer(c_int32_t) :: size = 1
    integer(c_int32_t) :: local_rank = 0
    integer(c_int32_t) :: local_size = 1
    type(c_ptr) :: rendezvous = c_null_ptr
  end type

  ! The names of the pushed tensors: inputs "x", targets "y".
  character(kind=c_char), target :: name_x(2) = [character(kind=c_char) :: 'x', c_null_char]
  character(kind=c_char), target :: name_y(2) = [character(kind=c_char) :: 'y', c_null_char]

  public :: bellows_version, bellows_api_version, bellows_last_error
  public :: bellows_create, bellows_create_from_string, bellows_create_job, bellows_create_job_from_string
  public :: bellows_destroy
  public :: bellows_push, bellows_push_block, bellows_buffered
  public :: bellows_train, bellows_train_async, bellows_poll, bellows_wait
  public :: bellows_predict_options_init, bellows_predict
  public :: bellows_save, bellows_restore, bellows_metrics_get, bellows_run_dir
  ! The old names of bellows_metrics_get and bellows_last_error, kept for programs written against them.
  public :: bellows_get_metrics, bellows_error_message
  ! For the modules over this one (bellows_mpi); programs pass overrides= to the create routines.
  public :: bellows_pack_overrides

  ! (Fortran has no generics over kinds and ranks: one short specific per combination.)
  ! One sample: x(features), y(values); real(c_float) or real(real64), each.
  interface bellows_push
    module procedure push_sample_32_32, push_sample_32_64, push_sample_64_32, push_sample_64_64
  end interface
  ! A block: x(features, n), y(values, n).
  interface bellows_push_block
    module procedure push_block_32_32, push_block_32_64, push_block_64_32, push_block_64_64
  end interface
  ! Predictions for context(features, rows): out(values, rows), or out(values, samples, rows) for several draws
  ! per row; context and out real(c_float) or real(real64), each.
  interface bellows_predict
    module procedure predict_32_32_rank2, predict_32_64_rank2, predict_64_32_rank2, predict_64_64_rank2, &
                     predict_32_32_rank3, predict_32_64_rank3, predict_64_32_rank3, predict_64_64_rank3
  end interface
  ! Integer arguments: the default kind or int64.
  interface bellows_buffered
    module procedure buffered_int64, buffered_int
  end interface
  interface bellows_train
    module procedure train_int64, train_int
  end interface
  interface bellows_train_async
    module procedure train_async_int64, train_async_int
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
    ! libbellows_c's own (src/capi/bellows_c_internal.h): sets this thread's message, returns status.
    function c_internal_fail(status, message) bind(c, name="bellows_internal_fail") result(s)
      import :: c_int, c_char
      integer(c_int), value :: status
      character(kind=c_char), intent(in) :: message(*)
      integer(c_int) :: s
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
    function c_create_job(path, overrides, n, job, out) bind(c, name="bellows_create_job") result(s)
      import :: c_char, c_ptr, c_int, c_int32_t, c_job
      character(kind=c_char), intent(in) :: path(*)
      type(c_ptr), value :: overrides
      integer(c_int32_t), value :: n
      type(c_job), intent(in) :: job
      type(c_ptr), intent(out) :: out
      integer(c_int) :: s
    end function
    function c_create_job_from_string(yaml, overrides, n, job, out) bind(c, name="bellows_create_job_from_string") result(s)
      import :: c_char, c_ptr, c_int, c_int32_t, c_job
      character(kind=c_char), intent(in) :: yaml(*)
      type(c_ptr), value :: overrides
      integer(c_int32_t), value :: n
      type(c_job), intent(in) :: job
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
      import :: bellows_predict_options
      type(bellows_predict_options), intent(out) :: o
    end subroutine
    function c_predict(t, input, output, capacity, options) bind(c, name="bellows_predict") result(s)
      import :: c_ptr, c_int, c_int64_t, c_tensor, bellows_predict_options
      type(c_ptr), value :: t
      type(c_tensor), intent(in) :: input
      type(c_tensor), intent(inout) :: output
      integer(c_int64_t), value :: capacity
      type(bellows_predict_options), intent(in) :: options
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

  ! --- strings -------------------------------------------------------------------------------------------------

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

  ! status, with message as this thread's last error: a failure found in Fortran before any C call.
  integer function fail(status, message)
    integer, intent(in) :: status
    character(len=*), intent(in) :: message
    fail = int(c_internal_fail(int(status, c_int), message // c_null_char))
  end function

  ! "key=value" overrides as the C API takes them: NUL-terminated strings in pool, their addresses in pointers;
  ! array is c_loc(pointers) (c_null_ptr without overrides) and count their number. pool and pointers must
  ! outlive the C call that gets array (declare them allocatable, target in the caller).
  subroutine bellows_pack_overrides(pool, pointers, array, count, overrides)
    character(kind=c_char), allocatable, target, intent(out) :: pool(:)
    type(c_ptr), allocatable, target, intent(out) :: pointers(:)
    type(c_ptr), intent(out) :: array
    integer(c_int32_t), intent(out) :: count
    character(len=*), intent(in), optional :: overrides(:)
    integer :: i, j, at, total
    array = c_null_ptr
    count = 0
    if (.not. present(overrides)) return
    if (size(overrides) == 0) return
    total = 0
    do i = 1, size(overrides)
      total = total + len_trim(overrides(i)) + 1
    end do
    allocate(pool(total), pointers(size(overrides)))
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
    array = c_loc(pointers)
    count = int(size(overrides), c_int32_t)
  end subroutine

  ! --- optional numeric keywords of any kind ---------------------------------------------------------------------

  ! x (any integer kind) as int64; ok becomes false for another type.
  subroutine integer_value(x, value, ok)
    class(*), intent(in) :: x
    integer(int64), intent(inout) :: value
    logical, intent(inout) :: ok
    select type (x)
    type is (integer(int8))
      value = int(x, int64)
    type is (integer(int16))
      value = int(x, int64)
    type is (integer(int32))
      value = int(x, int64)
    type is (integer(int64))
      value = x
    class default
      ok = .false.
    end select
  end subroutine

  ! x (any real or integer kind) as real64; ok becomes false for another type.
  subroutine real_value(x, value, ok)
    class(*), intent(in) :: x
    real(real64), intent(inout) :: value
    logical, intent(inout) :: ok
    integer(int64) :: i
    select type (x)
    type is (real(real32))
      value = real(x, real64)
    type is (real(real64))
      value = x
    class default
      i = 0
      call integer_value(x, i, ok)
      if (ok) value = real(i, real64)
    end select
  end subroutine

  ! An optional integer keyword into value (unchanged when absent); status BELLOWS_ERR_USAGE for another type.
  subroutine optional_integer(x, value, call, name, status)
    class(*), intent(in), optional :: x
    integer(int64), intent(inout) :: value
    character(len=*), intent(in) :: call, name
    integer, intent(inout) :: status
    logical :: ok
    if (.not. present(x) .or. status /= BELLOWS_OK) return
    ok = .true.
    call integer_value(x, value, ok)
    if (.not. ok) status = fail(BELLOWS_ERR_USAGE, call // ': ' // name // ' is not an integer (pass ' // name // &
                                '=7 or ' // name // '=7_int64)')
  end subroutine

  ! value as a C int32_t for the C call `call`; status BELLOWS_ERR_USAGE when it does not fit.
  subroutine to_int32(value, out, call, name, status)
    integer(int64), intent(in) :: value
    integer(c_int32_t), intent(out) :: out
    character(len=*), intent(in) :: call, name
    integer, intent(inout) :: status
    character(len=24) :: text
    out = 0
    if (status /= BELLOWS_OK) return
    if (abs(value) > int(huge(0_c_int32_t), int64)) then
      write (text, '(i0)') value
      status = fail(BELLOWS_ERR_USAGE, call // ': ' // name // ' is ' // trim(text) // &
                    ", beyond the C API's 32-bit integers (pass a rank or count of the job)")
      return
    end if
    out = int(value, c_int32_t)
  end subroutine

  ! --- version and errors ----------------------------------------------------------------------------------------

  function bellows_version() result(version)
    character(len=:), allocatable :: version
    version = from_c(c_version())
  end function

  integer function bellows_api_version()
    bellows_api_version = int(c_api_version())
  end function

  ! The message of this thread's last failed call ("" if none).
  function bellows_last_error() result(message)
    character(len=:), allocatable :: message
    message = from_c(c_last_error())
  end function

  ! The old name of bellows_last_error.
  function bellows_error_message() result(message)
    character(len=:), allocatable :: message
    message = from_c(c_last_error())
  end function

  ! --- create and destroy ----------------------------------------------------------------------------------------

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

  ! A trainer from a YAML config file, with optional "key=value" overrides (e.g. "data.batch_size=16").
  ! BELLOWS_STARTED_FRESH: resume was asked for and no checkpoint found; the trainer exists, untrained.
  subroutine bellows_create(trainer, config_path, status, overrides)
    type(bellows_trainer), intent(out) :: trainer
    character(len=*), intent(in) :: config_path
    integer, intent(out) :: status
    character(len=*), intent(in), optional :: overrides(:)
    call create_any(trainer, config_path, .true., status, overrides)
  end subroutine

  ! The same from YAML text (lines separated by new_line('a')).
  subroutine bellows_create_from_string(trainer, yaml, status, overrides)
    type(bellows_trainer), intent(out) :: trainer
    character(len=*), intent(in) :: yaml
    integer, intent(out) :: status
    character(len=*), intent(in), optional :: overrides(:)
    call create_any(trainer, yaml, .false., status, overrides)
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

  ! rank and size: any integer kind (a default-kind literal too); a value of another type is BELLOWS_ERR_USAGE.
  subroutine bellows_create_job(trainer, config_path, rank, size, rendezvous, status, overrides, local_rank, local_size)
    type(bellows_trainer), intent(out) :: trainer
    character(len=*), intent(in) :: config_path, rendezvous
    class(*), intent(in) :: rank, size
    integer, intent(out) :: status
    character(len=*), intent(in), optional :: overrides(:)
    class(*), intent(in), optional :: local_rank, local_size
    call create_job_of(trainer, config_path, .true., 'bellows_create_job', rank, size, rendezvous, status, overrides, &
                       local_rank, local_size)
  end subroutine

  subroutine bellows_create_job_from_string(trainer, yaml, rank, size, rendezvous, status, overrides, local_rank, local_size)
    type(bellows_trainer), intent(out) :: trainer
    character(len=*), intent(in) :: yaml, rendezvous
    class(*), intent(in) :: rank, size
    integer, intent(out) :: status
    character(len=*), intent(in), optional :: overrides(:)
    class(*), intent(in), optional :: local_rank, local_size
    call create_job_of(trainer, yaml, .false., 'bellows_create_job_from_string', rank, size, rendezvous, status, &
                       overrides, local_rank, local_size)
  end subroutine

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

  ! Stops a running session at its next step, waits for it, frees the trainer; trainer%handle becomes null.
  subroutine bellows_destroy(trainer, status)
    type(bellows_trainer), intent(inout) :: trainer
    integer, intent(out) :: status
    status = int(c_destroy(trainer%handle))
    if (status == BELLOWS_OK) trainer%handle = c_null_ptr
  end subroutine

  ! --- pushes ----------------------------------------------------------------------------------------------------

  ! A C tensor over a Fortran array's memory: the shape reversed (see the top of this file).
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

  ! One sample: x(features), y(values).
  subroutine push_sample_32_32(trainer, x, y, status)
    type(bellows_trainer), intent(in) :: trainer
    real(c_float), intent(in), target, contiguous :: x(:)
    real(c_float), intent(in), target, contiguous :: y(:)
    integer, intent(out) :: status
    status = push_xy(trainer, c_loc(x), shape(x, int64), FLOAT32, c_loc(y), shape(y, int64), FLOAT32, .false.)
  end subroutine

  subroutine push_sample_32_64(trainer, x, y, status)
    type(bellows_trainer), intent(in) :: trainer
    real(c_float), intent(in), target, contiguous :: x(:)
    real(real64), intent(in), target, contiguous :: y(:)
    integer, intent(out) :: status
    status = push_xy(trainer, c_loc(x), shape(x, int64), FLOAT32, c_loc(y), shape(y, int64), FLOAT64, .false.)
  end subroutine

  subroutine push_sample_64_32(trainer, x, y, status)
    type(bellows_trainer), intent(in) :: trainer
    real(real64), intent(in), target, contiguous :: x(:)
    real(c_float), intent(in), target, contiguous :: y(:)
    integer, intent(out) :: status
    status = push_xy(trainer, c_loc(x), shape(x, int64), FLOAT64, c_loc(y), shape(y, int64), FLOAT32, .false.)
  end subroutine

  subroutine push_sample_64_64(trainer, x, y, status)
    type(bellows_trainer), intent(in) :: trainer
    real(real64), intent(in), target, contiguous :: x(:)
    real(real64), intent(in), target, contiguous :: y(:)
    integer, intent(out) :: status
    status = push_xy(trainer, c_loc(x), shape(x, int64), FLOAT64, c_loc(y), shape(y, int64), FLOAT64, .false.)
  end subroutine

  ! x(features, n), y(values, n): n samples (the C blocks x [n, features], y [n, values]).
  subroutine push_block_32_32(trainer, x, y, status)
    type(bellows_trainer), intent(in) :: trainer
    real(c_float), intent(in), target, contiguous :: x(:, :)
    real(c_float), intent(in), target, contiguous :: y(:, :)
    integer, intent(out) :: status
    status = push_xy(trainer, c_loc(x), shape(x, int64), FLOAT32, c_loc(y), shape(y, int64), FLOAT32, .true.)
  end subroutine

  subroutine push_block_32_64(trainer, x, y, status)
    type(bellows_trainer), intent(in) :: trainer
    real(c_float), intent(in), target, contiguous :: x(:, :)
    real(real64), intent(in), target, contiguous :: y(:, :)
    integer, intent(out) :: status
    status = push_xy(trainer, c_loc(x), shape(x, int64), FLOAT32, c_loc(y), shape(y, int64), FLOAT64, .true.)
  end subroutine

  subroutine push_block_64_32(trainer, x, y, status)
    type(bellows_trainer), intent(in) :: trainer
    real(real64), intent(in), target, contiguous :: x(:, :)
    real(c_float), intent(in), target, contiguous :: y(:, :)
    integer, intent(out) :: status
    status = push_xy(trainer, c_loc(x), shape(x, int64), FLOAT64, c_loc(y), shape(y, int64), FLOAT32, .true.)
  end subroutine

  subroutine push_block_64_64(trainer, x, y, status)
    type(bellows_trainer), intent(in) :: trainer
    real(real64), intent(in), target, contiguous :: x(:, :)
    real(real64), intent(in), target, contiguous :: y(:, :)
    integer, intent(out) :: status
    status = push_xy(trainer, c_loc(x), shape(x, int64), FLOAT64, c_loc(y), shape(y, int64), FLOAT64, .true.)
  end subroutine

  ! Samples in the buffer now.
  subroutine buffered_int64(trainer, samples, status)
    type(bellows_trainer), intent(in) :: trainer
    integer(int64), intent(out) :: samples
    integer, intent(out) :: status
    integer(c_int64_t) :: n
    n = 0
    status = int(c_buffered(trainer%handle, n))
    samples = int(n, int64)
  end subroutine

  subroutine buffered_int(trainer, samples, status)
    type(bellows_trainer), intent(in) :: trainer
    integer, intent(out) :: samples
    integer, intent(out) :: status
    integer(c_int64_t) :: n
    n = 0
    status = int(c_buffered(trainer%handle, n))
    samples = int(min(n, int(huge(samples), c_int64_t)))
  end subroutine

  ! --- sessions --------------------------------------------------------------------------------------------------

  ! A session when at least min_samples are buffered (0: data.stream.ready_samples), else BELLOWS_NOT_READY.
  subroutine train_int64(trainer, min_samples, status)
    type(bellows_trainer), intent(in) :: trainer
    integer(int64), intent(in) :: min_samples
    integer, intent(out) :: status
    status = int(c_train(trainer%handle, int(min_samples, c_int64_t)))
  end subroutine

  subroutine train_int(trainer, min_samples, status)
    type(bellows_trainer), intent(in) :: trainer
    integer, intent(in) :: min_samples
    integer, intent(out) :: status
    status = int(c_train(trainer%handle, int(min_samples, c_int64_t)))
  end subroutine

  ! The same on bellows' thread: returns at once.
  subroutine train_async_int64(trainer, min_samples, status)
    type(bellows_trainer), intent(in) :: trainer
    integer(int64), intent(in) :: min_samples
    integer, intent(out) :: status
    status = int(c_train_async(trainer%handle, int(min_samples, c_int64_t)))
  end subroutine

  subroutine train_async_int(trainer, min_samples, status)
    type(bellows_trainer), intent(in) :: trainer
    integer, intent(in) :: min_samples
    integer, intent(out) :: status
    status = int(c_train_async(trainer%handle, int(min_samples, c_int64_t)))
  end subroutine

  ! status: BELLOWS_RUNNING while the background session runs, BELLOWS_OK when none does.
  subroutine bellows_poll(trainer, status)
    type(bellows_trainer), intent(in) :: trainer
    integer, intent(out) :: status
    status = int(c_poll(trainer%handle))
  end subroutine

  ! Waits for the background session (its status is this call's); BELLOWS_OK at once when none runs.
  subroutine bellows_wait(trainer, status)
    type(bellows_trainer), intent(in) :: trainer
    integer, intent(out) :: status
    status = int(c_wait(trainer%handle))
  end subroutine

  ! --- predictions -----------------------------------------------------------------------------------------------

  ! The C defaults (the C call has no status).
  subroutine bellows_predict_options_init(options)
    type(bellows_predict_options), intent(out) :: options
    call c_predict_options_init(options)
  end subroutine

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
      call bellows_predict_options_init(o)
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

  ! context(features, rows) -> out(values, rows): one ddpm sample per row (or the model's outputs).
  subroutine predict_32_32_rank2(trainer, context, out, status, options, seed, first_index, steps, eta, ema)
    type(bellows_trainer), intent(in) :: trainer
    real(c_float), intent(in), target, contiguous :: context(:, :)
    real(c_float), intent(out), target, contiguous :: out(:, :)
    integer, intent(out) :: status
    type(bellows_predict_options), intent(in), optional :: options
    class(*), intent(in), optional :: seed, first_index, steps, eta
    logical, intent(in), optional :: ema
    type(bellows_predict_options) :: o
    status = resolve_options(o, 1_int64, options, seed, first_index, steps, eta, ema)
    if (status == BELLOWS_OK) status = predict_into(trainer, c_loc(context), shape(context, int64), FLOAT32, &
                                                    c_loc(out), shape(out, int64), FLOAT32, o)
  end subroutine

  subroutine predict_32_64_rank2(trainer, context, out, status, options, seed, first_index, steps, eta, ema)
    type(bellows_trainer), intent(in) :: trainer
    real(c_float), intent(in), target, contiguous :: context(:, :)
    real(real64), intent(out), target, contiguous :: out(:, :)
    integer, intent(out) :: status
    type(bellows_predict_options), intent(in), optional :: options
    class(*), intent(in), optional :: seed, first_index, steps, eta
    logical, intent(in), optional :: ema
    type(bellows_predict_options) :: o
    status = resolve_options(o, 1_int64, options, seed, first_index, steps, eta, ema)
    if (status == BELLOWS_OK) status = predict_into(trainer, c_loc(context), shape(context, int64), FLOAT32, &
                                                    c_loc(out), shape(out, int64), FLOAT64, o)
  end subroutine

  subroutine predict_64_32_rank2(trainer, context, out, status, options, seed, first_index, steps, eta, ema)
    type(bellows_trainer), intent(in) :: trainer
    real(real64), intent(in), target, contiguous :: context(:, :)
    real(c_float), intent(out), target, contiguous :: out(:, :)
    integer, intent(out) :: status
    type(bellows_predict_options), intent(in), optional :: options
    class(*), intent(in), optional :: seed, first_index, steps, eta
    logical, intent(in), optional :: ema
    type(bellows_predict_options) :: o
    status = resolve_options(o, 1_int64, options, seed, first_index, steps, eta, ema)
    if (status == BELLOWS_OK) status = predict_into(trainer, c_loc(context), shape(context, int64), FLOAT64, &
                                                    c_loc(out), shape(out, int64), FLOAT32, o)
  end subroutine

  subroutine predict_64_64_rank2(trainer, context, out, status, options, seed, first_index, steps, eta, ema)
    type(bellows_trainer), intent(in) :: trainer
    real(real64), intent(in), target, contiguous :: context(:, :)
    real(real64), intent(out), target, contiguous :: out(:, :)
    integer, intent(out) :: status
    type(bellows_predict_options), intent(in), optional :: options
    class(*), intent(in), optional :: seed, first_index, steps, eta
    logical, intent(in), optional :: ema
    type(bellows_predict_options) :: o
    status = resolve_options(o, 1_int64, options, seed, first_index, steps, eta, ema)
    if (status == BELLOWS_OK) status = predict_into(trainer, c_loc(context), shape(context, int64), FLOAT64, &
                                                    c_loc(out), shape(out, int64), FLOAT64, o)
  end subroutine

  ! context(features, rows) -> out(values, samples, rows): size(out, 2) ddpm draws per row.
  subroutine predict_32_32_rank3(trainer, context, out, status, options, seed, first_index, steps, eta, ema)
    type(bellows_trainer), intent(in) :: trainer
    real(c_float), intent(in), target, contiguous :: context(:, :)
    real(c_float), intent(out), target, contiguous :: out(:, :, :)
    integer, intent(out) :: status
    type(bellows_predict_options), intent(in), optional :: options
    class(*), intent(in), optional :: seed, first_index, steps, eta
    logical, intent(in), optional :: ema
    type(bellows_predict_options) :: o
    status = resolve_options(o, size(out, 2, int64), options, seed, first_index, steps, eta, ema)
    if (status == BELLOWS_OK) status = predict_into(trainer, c_loc(context), shape(context, int64), FLOAT32, &
                                                    c_loc(out), shape(out, int64), FLOAT32, o)
  end subroutine

  subroutine predict_32_64_rank3(trainer, context, out, status, options, seed, first_index, steps, eta, ema)
    type(bellows_trainer), intent(in) :: trainer
    real(c_float), intent(in), target, contiguous :: context(:, :)
    real(real64), intent(out), target, contiguous :: out(:, :, :)
    integer, intent(out) :: status
    type(bellows_predict_options), intent(in), optional :: options
    class(*), intent(in), optional :: seed, first_index, steps, eta
    logical, intent(in), optional :: ema
    type(bellows_predict_options) :: o
    status = resolve_options(o, size(out, 2, int64), options, seed, first_index, steps, eta, ema)
    if (status == BELLOWS_OK) status = predict_into(trainer, c_loc(context), shape(context, int64), FLOAT32, &
                                                    c_loc(out), shape(out, int64), FLOAT64, o)
  end subroutine

  subroutine predict_64_32_rank3(trainer, context, out, status, options, seed, first_index, steps, eta, ema)
    type(bellows_trainer), intent(in) :: trainer
    real(real64), intent(in), target, contiguous :: context(:, :)
    real(c_float), intent(out), target, contiguous :: out(:, :, :)
    integer, intent(out) :: status
    type(bellows_predict_options), intent(in), optional :: options
    class(*), intent(in), optional :: seed, first_index, steps, eta
    logical, intent(in), optional :: ema
    type(bellows_predict_options) :: o
    status = resolve_options(o, size(out, 2, int64), options, seed, first_index, steps, eta, ema)
    if (status == BELLOWS_OK) status = predict_into(trainer, c_loc(context), shape(context, int64), FLOAT64, &
                                                    c_loc(out), shape(out, int64), FLOAT32, o)
  end subroutine

  subroutine predict_64_64_rank3(trainer, context, out, status, options, seed, first_index, steps, eta, ema)
    type(bellows_trainer), intent(in) :: trainer
    real(real64), intent(in), target, contiguous :: context(:, :)
    real(real64), intent(out), target, contiguous :: out(:, :, :)
    integer, intent(out) :: status
    type(bellows_predict_options), intent(in), optional :: options
    class(*), intent(in), optional :: seed, first_index, steps, eta
    logical, intent(in), optional :: ema
    type(bellows_predict_options) :: o
    status = resolve_options(o, size(out, 2, int64), options, seed, first_index, steps, eta, ema)
    if (status == BELLOWS_OK) status = predict_into(trainer, c_loc(context), shape(context, int64), FLOAT64, &
                                                    c_loc(out), shape(out, int64), FLOAT64, o)
  end subroutine

  ! --- checkpoints and numbers -----------------------------------------------------------------------------------

  ! A checkpoint now; path (optional, by keyword) receives its directory.
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

  ! The latest numbers.
  subroutine bellows_metrics_get(trainer, metrics, status)
    type(bellows_trainer), intent(in) :: trainer
    type(bellows_metrics), intent(out) :: metrics
    integer, intent(out) :: status
    status = int(c_metrics(trainer%handle, metrics))
  end subroutine

  ! The old name of bellows_metrics_get.
  subroutine bellows_get_metrics(trainer, metrics, status)
    type(bellows_trainer), intent(in) :: trainer
    type(bellows_metrics), intent(out) :: metrics
    integer, intent(out) :: status
    call bellows_metrics_get(trainer, metrics, status)
  end subroutine

  ! The run directory.
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
