! The Fortran module `bellows` as a new user writes it: default-kind literals for every integer (bellows_train(t, 0,
! status)), int64 where a program has them, real32 and real64 arrays in and out of pushes and predictions (the four
! kind combinations of a prediction agree), every call in the one argument order (save and restore included), the
! C names (bellows_metrics_get, bellows_last_error) and their old aliases, and bellows_create_job's refusals.
! Compiling it is half the test; run, it trains a small ddpm online and checks what it gets back.
!   fortran_kinds WORK_DIR     (stops with a non-zero code on any failed check)
program fortran_kinds
  use, intrinsic :: iso_c_binding, only: c_float, c_associated
  use, intrinsic :: iso_fortran_env, only: int64, real64, error_unit
  use, intrinsic :: ieee_arithmetic, only: ieee_is_nan
  use bellows
  implicit none

  integer, parameter :: nctx = 3, nout = 8, rows = 4
  type(bellows_trainer) :: t, fresh, job_trainer
  type(bellows_metrics) :: m, m_old
  type(bellows_predict_options) :: options
  character(len=4096) :: work
  character(len=:), allocatable :: config, yaml, saved, run_dir
  integer :: status, failures, buffered, step_before
  integer(int64) :: buffered64
  real(real64) :: x64(nctx, 40), y64(nout, 40), context64(nctx, rows)
  real(c_float) :: x32(nctx, 24), y32(nout, 24), context32(nctx, rows)
  real(c_float) :: out32(nout, rows), draws32(nout, 2, rows)
  real(real64) :: out64(nout, rows), draws64(nout, 2, rows), again64(nout, rows)

  failures = 0
  if (command_argument_count() /= 1) then
    write (error_unit, '(a)') 'usage: fortran_kinds WORK_DIR'
    stop 2
  end if
  call get_command_argument(1, work)
  call check(bellows_api_version() == BELLOWS_C_API_VERSION, 'bellows_api_version() == BELLOWS_C_API_VERSION (200)')
  call check(BELLOWS_C_API_VERSION == 200 .and. BELLOWS_STARTED_FRESH == 9, 'the module''s constants')

  ! --- create: a config file with overrides ---------------------------------------------------------------------
  yaml = config_text(trim(work) // '/runs')
  config = trim(work) // '/fortran_kinds.yaml'
  call write_file(config, yaml)
  call bellows_create(t, config, status, overrides=[character(len=32) :: 'train.epochs=2', 'seed=0'])
  call expect(status, BELLOWS_OK, 'bellows_create')
  if (status /= BELLOWS_OK) stop 1

  ! --- pushes: real64 and real32 blocks, one real32/real64 sample ---------------------------------------------------
  call fill(x64, y64, 0.0_real64)
  call bellows_push_block(t, x64, y64, status)
  call expect(status, BELLOWS_OK, 'bellows_push_block real64')
  call fill32(x32, y32, 0.5_real64)
  call bellows_push_block(t, x32, y32, status)
  call expect(status, BELLOWS_OK, 'bellows_push_block real32')
  call bellows_push(t, x32(:, 1), y64(:, 1), status)
  call expect(status, BELLOWS_OK, 'bellows_push real32 x, real64 y')
  call bellows_buffered(t, buffered, status)
  call expect(status, BELLOWS_OK, 'bellows_buffered (default integer)')
  call check(buffered == 65, 'bellows_buffered: 65 samples')
  call bellows_buffered(t, buffered64, status)
  call check(status == BELLOWS_OK .and. buffered64 == 65_int64, 'bellows_buffered (int64): 65 samples')

  ! --- sessions: default-kind and int64 min_samples ---------------------------------------------------------------
  call bellows_train(t, 1000, status)
  call expect(status, BELLOWS_NOT_READY, 'bellows_train(t, 1000, status) with 65 buffered')
  call bellows_train(t, 0, status)
  call expect(status, BELLOWS_OK, 'bellows_train(t, 0, status)')
  call bellows_wait(t, status)
  call expect(status, BELLOWS_OK, 'bellows_wait with no session')
  call bellows_push_block(t, x64, y64, status)
  call bellows_push_block(t, x32, y32, status)
  call bellows_train_async(t, 64_int64, status)
  call expect(status, BELLOWS_OK, 'bellows_train_async(t, 64_int64, status)')
  call bellows_poll(t, status)
  call check(status == BELLOWS_OK .or. status == BELLOWS_RUNNING, 'bellows_poll: running or done')
  call bellows_wait(t, status)
  call expect(status, BELLOWS_OK, 'bellows_wait')

  ! --- predictions: the four kind combinations agree, one draw per row and two ----------------------------------
  context64 = x64(:, 1:rows)
  context32 = real(context64, c_float)
  call bellows_predict(t, context32, out32, status, seed=7)
  call expect(status, BELLOWS_OK, 'bellows_predict real32 -> real32, seed=7')
  call bellows_predict(t, context64, out64, status, seed=7_int64)
  call expect(status, BELLOWS_OK, 'bellows_predict real64 -> real64, seed=7_int64')
  call check(maxval(abs(out64 - real(out32, real64))) <= 1e-5_real64 * max(1.0_real64, maxval(abs(out64))), &
             'real32 and real64 predictions agree')
  ! (exact comparisons: the library predicts in float32 and converts, so every kind gets the same values)
  call bellows_predict(t, context32, again64, status, seed=7)
  call check(status == BELLOWS_OK .and. all(again64 == out64), 'bellows_predict real32 -> real64 as real64 -> real64')
  call bellows_predict(t, context64, out32, status, seed=7)
  call check(status == BELLOWS_OK .and. all(real(out32, real64) == again64), 'bellows_predict real64 -> real32')
  call bellows_predict(t, context32, draws32, status, seed=3, steps=5, eta=0.5, ema=.true.)
  call expect(status, BELLOWS_OK, 'bellows_predict real32 -> real32 (2 draws), steps=5, eta=0.5 (default kinds)')
  call bellows_predict(t, context64, draws64, status, seed=3_int64, steps=5_int64, eta=0.5_real64, ema=.true.)
  call expect(status, BELLOWS_OK, 'bellows_predict real64 -> real64 (2 draws), int64 and real64 keywords')
  call check(maxval(abs(draws64 - real(draws32, real64))) <= 1e-5_real64 * max(1.0_real64, maxval(abs(draws64))), &
             'two draws per row: real32 and real64 agree')
  call bellows_predict_options_init(options)
  call check(options%samples == 1 .and. options%ema == -1 .and. options%seed == 0, 'bellows_predict_options_init')
  options%seed = 7
  call bellows_predict(t, context64, again64, status, options=options)
  call check(status == BELLOWS_OK .and. all(again64 == out64), 'bellows_predict options=: the same as seed=7')
  call bellows_predict(t, context64, again64, status, seed='seven')
  call expect(status, BELLOWS_ERR_USAGE, 'bellows_predict seed=''seven''')
  call check(index(bellows_last_error(), 'seed') > 0, 'its message names seed: ' // bellows_last_error())

  ! --- numbers: bellows_metrics_get and the old name --------------------------------------------------------------
  call bellows_metrics_get(t, m, status)
  call expect(status, BELLOWS_OK, 'bellows_metrics_get')
  call bellows_get_metrics(t, m_old, status)
  call expect(status, BELLOWS_OK, 'bellows_get_metrics (the old name)')
  call check(m%step > 0 .and. m%sessions == 2 .and. m%pushed == 65 + 64, 'metrics: steps, 2 sessions, 129 pushed')
  call check(m%ranks == 1 .and. m%rank == 0 .and. m%restored == 0 .and. m%rejected == 0 .and. m%training == 0, &
             'metrics: one rank, rank 0, not restored, nothing rejected, not training')
  call check(ieee_is_nan(m%eval_loss), 'metrics: eval_loss NaN (val_fraction 0)')
  call check(m_old%step == m%step .and. m_old%pushed == m%pushed, 'bellows_get_metrics = bellows_metrics_get')
  step_before = int(m%step)

  ! --- checkpoints: save(t, status, path=), restore(t, path, status) ----------------------------------------------
  call bellows_save(t, status, path=saved)
  call expect(status, BELLOWS_OK, 'bellows_save')
  call check(index(saved, 'step-') > 0, 'bellows_save path=: ' // saved)
  call bellows_save(t, status)
  call expect(status, BELLOWS_OK, 'bellows_save without path')
  call bellows_run_dir(t, run_dir, status)
  call check(status == BELLOWS_OK .and. index(run_dir, 'fortran_kinds') > 0, 'bellows_run_dir: ' // run_dir)
  call bellows_restore(t, saved, status)
  call expect(status, BELLOWS_OK, 'bellows_restore(t, path, status)')
  call bellows_metrics_get(t, m, status)
  call check(status == BELLOWS_OK .and. m%restored == 1 .and. m%step == step_before, 'metrics after restore: restored 1')
  call bellows_restore(t, trim(work) // '/nowhere', status)
  call expect(status, BELLOWS_ERR_DATA, 'bellows_restore of no checkpoint')
  call check(len(bellows_error_message()) > 0, 'bellows_error_message (the old name) has the message')

  ! --- resume asked, no checkpoint: BELLOWS_STARTED_FRESH, and the trainer exists -----------------------------------
  call bellows_create_from_string(fresh, config_text(trim(work) // '/fresh'), status, overrides=['resume=auto'])
  call expect(status, BELLOWS_STARTED_FRESH, 'bellows_create_from_string resume=auto without a checkpoint')
  call check(c_associated(fresh%handle), 'BELLOWS_STARTED_FRESH: the trainer exists')
  call bellows_destroy(fresh, status)
  call expect(status, BELLOWS_OK, 'bellows_destroy of the fresh trainer')

  ! --- bellows_create_job: default-kind and int64 ranks; the refusals ---------------------------------------------
  call bellows_create_job(job_trainer, config, 1, 1, '127.0.0.1:1', status, overrides=['dist.timeout_s=5'])
  call check(status /= BELLOWS_OK .and. .not. c_associated(job_trainer%handle), &
             'bellows_create_job rank 1 of 1 is refused: ' // bellows_last_error())
  call bellows_create_job(job_trainer, config, 0_int64, 3000000000_int64, '127.0.0.1:1', status, local_rank=0, &
                          local_size=1_int64)
  call expect(status, BELLOWS_ERR_USAGE, 'bellows_create_job size 3000000000')
  call check(index(bellows_last_error(), 'size') > 0, 'its message names size: ' // bellows_last_error())
  call bellows_create_job_from_string(job_trainer, yaml, 0, 2, '127.0.0.1:1', status, local_rank=2.5)
  call expect(status, BELLOWS_ERR_USAGE, 'bellows_create_job_from_string local_rank=2.5')

  call bellows_destroy(t, status)
  call expect(status, BELLOWS_OK, 'bellows_destroy')
  call check(.not. c_associated(t%handle), 'bellows_destroy nulls the handle')
  if (failures > 0) then
    write (error_unit, '(i0, a)') failures, ' checks failed'
    stop 1
  end if
  write (*, '(a)') 'fortran_kinds: every check passed'

contains

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (ok) return
    failures = failures + 1
    write (error_unit, '(a, a)') 'FAILED: ', what
  end subroutine

  subroutine expect(status, wanted, what)
    integer, intent(in) :: status, wanted
    character(len=*), intent(in) :: what
    character(len=64) :: got
    write (got, '(a, i0, a, i0)') ' (status ', status, ', expected ', wanted
    call check(status == wanted, what // trim(got) // ') ' // bellows_last_error())
  end subroutine

  ! A small conditional ddpm (3 context values -> 8 values), trained online (tests/capi/capi_test.cpp's).
  function config_text(output_dir) result(text)
    character(len=*), intent(in) :: output_dir
    character(len=:), allocatable :: text
    character(len=1), parameter :: nl = new_line('a')
    text = 'name: fortran_kinds' // nl // 'seed: 0' // nl // 'output_dir: ' // output_dir // nl // &
           'online: {console: none}' // nl // 'data:' // nl // '  source: stream' // nl // &
           '  stream: {capacity: 4096, ready_samples: 64}' // nl // '  batch_size: 32' // nl // &
           '  val_fraction: 0' // nl // &
           'model: {name: ddpm, context_features: 3, out_features: 8, hidden: 16, steps: 10}' // nl // &
           'train: {epochs: 2}' // nl // 'schedule: {type: constant}' // nl // 'ema: {enabled: true, decay: 0.9}' // nl
  end function

  subroutine write_file(path, text)
    character(len=*), intent(in) :: path, text
    integer :: unit
    open (newunit=unit, file=path, status='replace', action='write', access='stream', form='unformatted')
    write (unit) text
    close (unit)
  end subroutine

  ! x(:, i): 3 values of a sine; y(:, i): x repeated and cut to 8.
  subroutine fill(x, y, offset)
    real(real64), intent(out) :: x(:, :), y(:, :)
    real(real64), intent(in) :: offset
    integer :: i, j
    do i = 1, size(x, 2)
      do j = 1, nctx
        x(j, i) = sin(offset + 0.1_real64 * ((i - 1) * nctx + j - 1))
      end do
      do j = 1, nout
        y(j, i) = x(mod(j - 1, nctx) + 1, i)
      end do
    end do
  end subroutine

  subroutine fill32(x, y, offset)
    real(c_float), intent(out) :: x(:, :), y(:, :)
    real(real64), intent(in) :: offset
    real(real64) :: x8(size(x, 1), size(x, 2)), y8(size(y, 1), size(y, 2))
    call fill(x8, y8, offset)
    x = real(x8, c_float)
    y = real(y8, c_float)
  end subroutine

end program fortran_kinds
