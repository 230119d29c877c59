! The C API (bellows/bellows_c.h) in ISO_C_BINDING declarations, for the module bellows (bellows.f90) and its
! helpers: the status codes, the structs, and every C function as c_<name>. Programs `use bellows`, which makes the
! status codes, BELLOWS_C_API_VERSION and the types bellows_trainer, bellows_metrics, bellows_predict_options public.
module bellows_c_binding
  use, intrinsic :: iso_c_binding
  implicit none
  private

  public :: c_version, c_api_version, c_last_error, c_internal_fail, c_strlen
  public :: c_create, c_create_from_string, c_create_job, c_create_job_from_string, c_destroy
  public :: c_push, c_push_block, c_buffered, c_train, c_train_async, c_poll, c_wait
  public :: c_predict_options_init, c_predict, c_save, c_restore, c_metrics, c_run_dir

  integer, parameter, public :: BELLOWS_OK = 0, BELLOWS_ERR_INTERNAL = 1, BELLOWS_ERR_USAGE = 2, &
                                BELLOWS_ERR_CONFIG = 3, BELLOWS_ERR_DATA = 4, BELLOWS_ERR_RESOURCE = 5, &
                                BELLOWS_ERR_BUSY = 6, BELLOWS_NOT_READY = 7, BELLOWS_RUNNING = 8, &
                                BELLOWS_STARTED_FRESH = 9
  ! The API version of bellows_c.h this module was written for; bellows_api_version() is the library's.
  integer, parameter, public :: BELLOWS_C_API_VERSION = 200

  integer(c_int32_t), parameter, public :: FLOAT32 = 0, FLOAT64 = 1
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

  type, bind(c), public :: c_tensor
    type(c_ptr) :: name = c_null_ptr
    type(c_ptr) :: data = c_null_ptr
    integer(c_int32_t) :: dtype = 0
    integer(c_int32_t) :: ndim = 0
    integer(c_int64_t) :: shape(MAX_DIMS) = 0
  end type

  ! bellows_job in C.
  type, bind(c), public :: c_job
    integer(c_int32_t) :: rank = 0
    integer(c_int32_t) :: size = 1
    integer(c_int32_t) :: local_rank = 0
    integer(c_int32_t) :: local_size = 1
    type(c_ptr) :: rendezvous = c_null_ptr
  end type

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

end module bellows_c_binding
