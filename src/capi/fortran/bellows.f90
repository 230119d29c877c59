! The bellows Fortran module: Fortran 2008 with ISO_C_BINDING over the C API (bellows/bellows_c.h); every call of
! the C API as a procedure of the same name, with Fortran arrays. docs/c_api.md is the guide and has a table of
! every procedure; the module bellows_mpi (bellows_mpi.f90) adds bellows_create_mpi over an MPI communicator.
!
! The module is four files, compiled in this order (as the build does): bellows_c_binding.f90 (the C API's
! declarations: status codes, structs, functions), bellows_c_conversions.f90 (strings, overrides, numeric keywords),
! bellows_c_calls.f90 (the work its specific procedures share), and this one (every public procedure).
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
  use, intrinsic :: iso_fortran_env, only: int64, real64
  use bellows_c_binding
  use bellows_c_conversions, only: from_c, from_buffer, bellows_pack_overrides
  use bellows_c_calls, only: create_any, create_job_of, push_xy, buffered_samples, predict_arrays
  implicit none
  private

  ! The C API's status codes and the API version of bellows_c.h this module was written for (bellows_api_version()
  ! is the library's); the types bellows_trainer (its handle is the C bellows_trainer*, null: none, there for calls
  ! into the C API that a program makes itself), bellows_metrics and bellows_predict_options (the C structs): all
  ! declared in bellows_c_binding.f90.
  public :: BELLOWS_OK, BELLOWS_ERR_INTERNAL, BELLOWS_ERR_USAGE, BELLOWS_ERR_CONFIG, BELLOWS_ERR_DATA, &
            BELLOWS_ERR_RESOURCE, BELLOWS_ERR_BUSY, BELLOWS_NOT_READY, BELLOWS_RUNNING, BELLOWS_STARTED_FRESH
  public :: BELLOWS_C_API_VERSION
  public :: bellows_trainer, bellows_metrics, bellows_predict_options
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

  ! (Fortran has no generics over kinds and ranks: one short specific per combination, over a helper of
  ! bellows_c_calls.f90.)
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

contains

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
    message = bellows_last_error()
  end function

  ! --- create and destroy ----------------------------------------------------------------------------------------

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

  ! Stops a running session at its next step, waits for it, frees the trainer; trainer%handle becomes null.
  subroutine bellows_destroy(trainer, status)
    type(bellows_trainer), intent(inout) :: trainer
    integer, intent(out) :: status
    status = int(c_destroy(trainer%handle))
    if (status == BELLOWS_OK) trainer%handle = c_null_ptr
  end subroutine

  ! --- pushes ----------------------------------------------------------------------------------------------------

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
    status = buffered_samples(trainer, samples)
  end subroutine

  subroutine buffered_int(trainer, samples, status)
    type(bellows_trainer), intent(in) :: trainer
    integer, intent(out) :: samples
    integer, intent(out) :: status
    integer(int64) :: n
    status = buffered_samples(trainer, n)
    samples = int(min(n, int(huge(samples), int64)))
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

  ! context(features, rows) -> out(values, rows): one ddpm sample per row (or the model's outputs).
  subroutine predict_32_32_rank2(trainer, context, out, status, options, seed, first_index, steps, eta, ema)
    type(bellows_trainer), intent(in) :: trainer
    real(c_float), intent(in), target, contiguous :: context(:, :)
    real(c_float), intent(out), target, contiguous :: out(:, :)
    integer, intent(out) :: status
    type(bellows_predict_options), intent(in), optional :: options
    class(*), intent(in), optional :: seed, first_index, steps, eta
    logical, intent(in), optional :: ema
    call predict_arrays(trainer, c_loc(context), shape(context, int64), FLOAT32, &
                        c_loc(out), shape(out, int64), FLOAT32, 1_int64, &
                        status, options, seed, first_index, steps, eta, ema)
  end subroutine

  subroutine predict_32_64_rank2(trainer, context, out, status, options, seed, first_index, steps, eta, ema)
    type(bellows_trainer), intent(in) :: trainer
    real(c_float), intent(in), target, contiguous :: context(:, :)
    real(real64), intent(out), target, contiguous :: out(:, :)
    integer, intent(out) :: status
    type(bellows_predict_options), intent(in), optional :: options
    class(*), intent(in), optional :: seed, first_index, steps, eta
    logical, intent(in), optional :: ema
    call predict_arrays(trainer, c_loc(context), shape(context, int64), FLOAT32, &
                        c_loc(out), shape(out, int64), FLOAT64, 1_int64, &
                        status, options, seed, first_index, steps, eta, ema)
  end subroutine

  subroutine predict_64_32_rank2(trainer, context, out, status, options, seed, first_index, steps, eta, ema)
    type(bellows_trainer), intent(in) :: trainer
    real(real64), intent(in), target, contiguous :: context(:, :)
    real(c_float), intent(out), target, contiguous :: out(:, :)
    integer, intent(out) :: status
    type(bellows_predict_options), intent(in), optional :: options
    class(*), intent(in), optional :: seed, first_index, steps, eta
    logical, intent(in), optional :: ema
    call predict_arrays(trainer, c_loc(context), shape(context, int64), FLOAT64, &
                        c_loc(out), shape(out, int64), FLOAT32, 1_int64, &
                        status, options, seed, first_index, steps, eta, ema)
  end subroutine

  subroutine predict_64_64_rank2(trainer, context, out, status, options, seed, first_index, steps, eta, ema)
    type(bellows_trainer), intent(in) :: trainer
    real(real64), intent(in), target, contiguous :: context(:, :)
    real(real64), intent(out), target, contiguous :: out(:, :)
    integer, intent(out) :: status
    type(bellows_predict_options), intent(in), optional :: options
    class(*), intent(in), optional :: seed, first_index, steps, eta
    logical, intent(in), optional :: ema
    call predict_arrays(trainer, c_loc(context), shape(context, int64), FLOAT64, &
                        c_loc(out), shape(out, int64), FLOAT64, 1_int64, &
                        status, options, seed, first_index, steps, eta, ema)
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
    call predict_arrays(trainer, c_loc(context), shape(context, int64), FLOAT32, &
                        c_loc(out), shape(out, int64), FLOAT32, size(out, 2, int64), &
                        status, options, seed, first_index, steps, eta, ema)
  end subroutine

  subroutine predict_32_64_rank3(trainer, context, out, status, options, seed, first_index, steps, eta, ema)
    type(bellows_trainer), intent(in) :: trainer
    real(c_float), intent(in), target, contiguous :: context(:, :)
    real(real64), intent(out), target, contiguous :: out(:, :, :)
    integer, intent(out) :: status
    type(bellows_predict_options), intent(in), optional :: options
    class(*), intent(in), optional :: seed, first_index, steps, eta
    logical, intent(in), optional :: ema
    call predict_arrays(trainer, c_loc(context), shape(context, int64), FLOAT32, &
                        c_loc(out), shape(out, int64), FLOAT64, size(out, 2, int64), &
                        status, options, seed, first_index, steps, eta, ema)
  end subroutine

  subroutine predict_64_32_rank3(trainer, context, out, status, options, seed, first_index, steps, eta, ema)
    type(bellows_trainer), intent(in) :: trainer
    real(real64), intent(in), target, contiguous :: context(:, :)
    real(c_float), intent(out), target, contiguous :: out(:, :, :)
    integer, intent(out) :: status
    type(bellows_predict_options), intent(in), optional :: options
    class(*), intent(in), optional :: seed, first_index, steps, eta
    logical, intent(in), optional :: ema
    call predict_arrays(trainer, c_loc(context), shape(context, int64), FLOAT64, &
                        c_loc(out), shape(out, int64), FLOAT32, size(out, 2, int64), &
                        status, options, seed, first_index, steps, eta, ema)
  end subroutine

  subroutine predict_64_64_rank3(trainer, context, out, status, options, seed, first_index, steps, eta, ema)
    type(bellows_trainer), intent(in) :: trainer
    real(real64), intent(in), target, contiguous :: context(:, :)
    real(real64), intent(out), target, contiguous :: out(:, :, :)
    integer, intent(out) :: status
    type(bellows_predict_options), intent(in), optional :: options
    class(*), intent(in), optional :: seed, first_index, steps, eta
    logical, intent(in), optional :: ema
    call predict_arrays(trainer, c_loc(context), shape(context, int64), FLOAT64, &
                        c_loc(out), shape(out, int64), FLOAT64, size(out, 2, int64), &
                        status, options, seed, first_index, steps, eta, ema)
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
