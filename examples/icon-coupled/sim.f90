! examples/icon-coupled, the Fortran driver: a toy "simulation" that trains bellows' conditional diffusion model
! online through the Fortran module `bellows`, as seed 002 does inside ICON. The physics are those of sim.c (see
! there): 8 x 8 coarse cells of 16 x 16 fine points, an advected large-scale pattern plus sub-grid structure;
! each cell is a sample every model step (7 coarse context values -> 256 fine values), pushed in double
! precision in Fortran order: context(7, cells), fine(256, cells).
!
! Every 48 steps it waits for the running session, evaluates the model on the current step (RMSE of the mean
! of 4 samples per cell against the true fine field, beside the bilinear interpolation's) and starts the next
! session on a background thread while it steps on. Its last 48 steps are trained synchronously and saved
! as a checkpoint, whose path it prints: a second run restarts from it, as a simulation restarts.
!
!   sim_f CONFIG OUTPUT_DIR FIRST_STEP LAST_STEP [CHECKPOINT] [key=value ...]
! prints "eval step S session N rmse R baseline B" per evaluation and "checkpoint PATH" at the end; stops with
! a non-zero code on any failed call.
program icon_coupled
  use, intrinsic :: iso_c_binding, only: c_float, c_double
  use, intrinsic :: iso_fortran_env, only: int64, real64, error_unit
  use bellows
  implicit none

  integer, parameter :: nc = 8, nf = 16, cells = nc * nc, nfine = nf * nf, ncontext = 7, every = 48, draws = 4
  real(real64), parameter :: pi = 3.14159265358979323846_real64

  type(bellows_trainer) :: trainer
  type(bellows_metrics) :: metrics
  character(len=4096) :: config, output_dir, restore_path, arg
  character(len=4200), allocatable :: overrides(:)
  character(len=:), allocatable :: saved
  integer :: first_step, last_step, step, status, i, nargs, n_overrides, sessions
  integer(int64) :: buffered
  logical :: running
  real(real64) :: fine(nc * nf, nc * nf), coarse(nc, nc)
  real(c_double) :: context(ncontext, cells), target(nfine, cells)

  nargs = command_argument_count()
  if (nargs < 4) then
    write (error_unit, '(a)') 'usage: sim_f CONFIG OUTPUT_DIR FIRST_STEP LAST_STEP [CHECKPOINT] [key=value ...]'
    stop 2
  end if
  call get_command_argument(1, config)
  call get_command_argument(2, output_dir)
  call get_command_argument(3, arg)
  read (arg, *) first_step
  call get_command_argument(4, arg)
  read (arg, *) last_step
  restore_path = ''
  allocate (overrides(max(nargs - 3, 1)))
  n_overrides = 1
  overrides(1) = 'output_dir=' // trim(output_dir)
  do i = 5, nargs
    call get_command_argument(i, arg)
    if (i == 5 .and. index(arg, '=') == 0) then
      restore_path = arg
    else
      n_overrides = n_overrides + 1
      overrides(n_overrides) = arg
    end if
  end do

  if (bellows_api_version() /= BELLOWS_C_API_VERSION) then
    write (error_unit, '(a)') 'sim_f: the bellows library and module differ in API version'
    stop 1
  end if
  call bellows_create(trainer, trim(config), status, overrides=overrides(1:n_overrides))
  call check(status, 'bellows_create')
  write (*, '(a, a, a, i0, a, i0)') 'sim_f: bellows ', bellows_version(), ', steps ', first_step, ' to ', last_step
  if (len_trim(restore_path) > 0) then
    call bellows_restore(trainer, trim(restore_path), status)
    call check(status, 'bellows_restore')
    write (*, '(a, a)') 'sim_f: restarted from ', trim(restore_path)
  end if

  ! A push of the wrong shape is refused with a message, and the program goes on.
  call simulate(first_step, fine, coarse)
  call make_samples(fine, coarse, context, target)
  call bellows_push_block(trainer, context(1:6, :), target, status)
  write (*, '(a, i0, a, a)') 'sim_f: a 6-value context: status ', status, ': ', bellows_last_error()
  if (status /= BELLOWS_ERR_CONFIG .and. status /= BELLOWS_ERR_DATA) stop 1
  call bellows_push(trainer, context(:, 1), target(1:255, 1), status)       ! one sample, 255 fine values
  write (*, '(a, i0, a, a)') 'sim_f: 255 fine values: status ', status, ': ', bellows_last_error()
  if (status /= BELLOWS_ERR_CONFIG .and. status /= BELLOWS_ERR_DATA) stop 1
  call bellows_run_dir(trainer, saved, status)
  call check(status, 'bellows_run_dir')
  write (*, '(a, a)') 'sim_f: run directory ', saved

  sessions = 0
  running = .false.
  do step = first_step, last_step
    call simulate(step, fine, coarse)
    call make_samples(fine, coarse, context, target)
    call bellows_push_block(trainer, context, target, status)   ! also while a session trains
    call check(status, 'bellows_push_block')
    if (mod(step, every) /= 0) cycle
    if (running) then
      call bellows_poll(trainer, status)                      ! BELLOWS_RUNNING or, when done, BELLOWS_OK
      if (status /= BELLOWS_OK .and. status /= BELLOWS_RUNNING) call check(status, 'bellows_poll')
      call bellows_wait(trainer, status)
      call check(status, 'bellows_wait')
      running = .false.
      sessions = sessions + 1
      call evaluate(step)
    end if
    call bellows_buffered(trainer, buffered, status)
    call check(status, 'bellows_buffered')
    if (buffered /= every * cells) then
      write (error_unit, '(a, i0, a, i0)') 'sim_f: ', buffered, ' samples buffered, expected ', every * cells
      stop 1
    end if
    if (step + every > last_step) then
      ! The run's last session: synchronously, then a checkpoint for the next run.
      call bellows_train(trainer, 0, status)
      call check(status, 'bellows_train')
      sessions = sessions + 1
      call evaluate(step)
    else
      call bellows_train_async(trainer, 0, status)
      call check(status, 'bellows_train_async')
      running = .true.
    end if
  end do
  if (running) then
    call bellows_wait(trainer, status)
    call check(status, 'bellows_wait')
  end if
  call bellows_save(trainer, status, path=saved)
  call check(status, 'bellows_save')
  write (*, '(a, a)') 'checkpoint ', saved
  call bellows_metrics_get(trainer, metrics, status)
  call check(status, 'bellows_metrics_get')
  write (*, '(a, i0, a, i0, a, f8.4, a, f10.0, a)') 'sim_f: ', metrics%step, ' optimizer steps, ', metrics%pushed, &
    ' samples pushed, last loss ', metrics%loss, ', ', metrics%samples_per_second, ' samples/s'
  call bellows_destroy(trainer, status)
  call check(status, 'bellows_destroy')

contains

  subroutine check(status, what)
    integer, intent(in) :: status
    character(len=*), intent(in) :: what
    if (status /= BELLOWS_OK) then
      write (error_unit, '(a, a, a, i0, a, a)') 'sim_f: ', what, ' failed (status ', status, '): ', bellows_last_error()
      stop 1
    end if
  end subroutine

  real(real64) function large_scale(x, y, t)
    real(real64), intent(in) :: x, y, t
    large_scale = sin(2 * pi * (x - 0.8_real64 * t)) * cos(2 * pi * (y - 0.3_real64 * t)) &
                  + 0.5_real64 * sin(2 * pi * (2 * x + y) - 1.3_real64 * t)
  end function

  ! fine(x, y): column gx, row gy of the fine grid; coarse(i, j): the cell means.
  subroutine simulate(step, fine, coarse)
    integer, intent(in) :: step
    real(real64), intent(out) :: fine(nc * nf, nc * nf), coarse(nc, nc)
    real(real64) :: t, x, y, xl, yl, l
    integer :: gx, gy, i, j, n
    n = nc * nf
    t = 0.01_real64 * step
    do gy = 0, n - 1
      do gx = 0, n - 1
        x = (gx + 0.5_real64) / n
        y = (gy + 0.5_real64) / n
        xl = (mod(gx, nf) + 0.5_real64) / nf
        yl = (mod(gy, nf) + 0.5_real64) / nf
        l = large_scale(x, y, t)
        ! rounded to single precision, as sim.c's field
        fine(gx + 1, gy + 1) = real(real(l + 0.8_real64 * tanh(2 * l) * sin(4 * pi * xl) * sin(4 * pi * yl), c_float), real64)
      end do
    end do
    do j = 1, nc
      do i = 1, nc
        coarse(i, j) = sum(fine((i - 1) * nf + 1:i * nf, (j - 1) * nf + 1:j * nf)) / nfine
      end do
    end do
  end subroutine

  integer function wrap(i)
    integer, intent(in) :: i
    wrap = modulo(i - 1, nc) + 1
  end function

  ! Cell (i, j) is sample (j - 1) * nc + i: its context and its fine values, row by row (k = a * nf + b + 1).
  subroutine make_samples(fine, coarse, context, target)
    real(real64), intent(in) :: fine(nc * nf, nc * nf), coarse(nc, nc)
    real(c_double), intent(out) :: context(ncontext, cells), target(nfine, cells)
    integer :: i, j, a, b, c
    do j = 1, nc
      do i = 1, nc
        c = (j - 1) * nc + i
        context(:, c) = [coarse(i, j), coarse(wrap(i + 1), j), coarse(wrap(i - 1), j), coarse(i, wrap(j + 1)), &
                         coarse(i, wrap(j - 1)), coarse(wrap(i + 1), wrap(j + 1)), coarse(wrap(i - 1), wrap(j - 1))]
        do a = 0, nf - 1
          do b = 0, nf - 1
            target(a * nf + b + 1, c) = fine((i - 1) * nf + b + 1, (j - 1) * nf + a + 1)
          end do
        end do
      end do
    end do
  end subroutine

  ! The bilinear interpolation of the cell-centre values (periodic) at every fine point.
  real(real64) function baseline_rmse(fine, coarse)
    real(real64), intent(in) :: fine(nc * nf, nc * nf), coarse(nc, nc)
    real(real64) :: u, v, fu, fv, value, sq
    integer :: gx, gy, i0, j0, n
    n = nc * nf
    sq = 0
    do gy = 0, n - 1
      do gx = 0, n - 1
        u = (gx + 0.5_real64) / nf - 0.5_real64
        v = (gy + 0.5_real64) / nf - 0.5_real64
        i0 = floor(u)
        j0 = floor(v)
        fu = u - i0
        fv = v - j0
        value = (1 - fu) * (1 - fv) * coarse(wrap(i0 + 1), wrap(j0 + 1)) + fu * (1 - fv) * coarse(wrap(i0 + 2), wrap(j0 + 1)) &
                + (1 - fu) * fv * coarse(wrap(i0 + 1), wrap(j0 + 2)) + fu * fv * coarse(wrap(i0 + 2), wrap(j0 + 2))
        sq = sq + (value - fine(gx + 1, gy + 1))**2
      end do
    end do
    baseline_rmse = sqrt(sq / (n * n))
  end function

  ! The mean of `draws` samples per cell against the true fine values of this step.
  subroutine evaluate(step)
    integer, intent(in) :: step
    real(real64), allocatable :: samples(:, :, :)
    real(real64) :: rmse
    integer :: status
    allocate (samples(nfine, draws, cells))
    call bellows_predict(trainer, context, samples, status, seed=step)   ! double precision in and out
    call check(status, 'bellows_predict')
    rmse = sqrt(sum((sum(samples, dim=2) / draws - target)**2) / (nfine * cells))
    write (*, '(a, i0, a, i0, a, f7.4, a, f7.4)') 'eval step ', step, ' session ', sessions, ' rmse ', rmse, &
      ' baseline ', baseline_rmse(fine, coarse)
    flush (6)
  end subroutine

end program icon_coupled
