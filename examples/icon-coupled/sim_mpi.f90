! examples/icon-coupled, the MPI driver in Fortran: sim.f90's toy simulation with its 8 x 8 coarse grid split among MPI
! ranks, training one model across them through the modules bellows_mpi and bellows (`use mpi_f08`). sim_mpi.c is the
! same program in C (see there for the layout); the physics and the output lines are the same.
!
! Each rank simulates its band of 8 / RANKS coarse rows and swaps its edge rows of coarse values with the ranks above
! and below (periodic halo, MPI_Sendrecv). The first TRAINERS ranks train on a communicator of their own
! (MPI_Comm_split, bellows_create_mpi); every other rank r sends its samples to training rank mod(r, TRAINERS) each
! step and never calls bellows. A training rank pushes one block per step (double precision, sample index last): its
! own cells, then its feeders'. data.batch_size is 128 / TRAINERS and data.stream.ready_samples 48 steps of a training
! rank's cells (command-line overrides come after and win). Every 48 steps: wait for the session (collective), evaluate
! (each training rank predicts the cells it pushed, the squared errors summed over the ranks), start the next session in
! the background; the run's last session trains synchronously and a checkpoint is saved (collective). A second run
! restarts from CHECKPOINT (bellows_restore on every training rank), also on another number of training ranks.
!
!   mpirun -n RANKS sim_mpi_f CONFIG OUTPUT_DIR FIRST_STEP LAST_STEP TRAINERS [CHECKPOINT] [key=value ...]
! Rank 0 prints "eval step S session N rmse R baseline B samples/s/rank X" per evaluation and "checkpoint PATH" at the
! end; any failed call stops the job. RANKS divides 8, TRAINERS divides RANKS.
program icon_coupled_mpi
  use, intrinsic :: iso_c_binding, only: c_float, c_double
  use, intrinsic :: iso_fortran_env, only: int64, real64, error_unit
  use mpi_f08
  use bellows
  use bellows_mpi
  implicit none

  integer, parameter :: nc = 8, nf = 16, cells = nc * nc, nfine = nf * nf, ncontext = 7, every = 48, draws = 4
  integer, parameter :: batch = 128          ! the global batch: data.batch_size is batch / trainers on every training rank
  real(real64), parameter :: pi = 3.14159265358979323846_real64

  type(bellows_trainer) :: trainer
  type(bellows_metrics) :: metrics
  type(MPI_Comm) :: training_comm
  character(len=4096) :: config, arg, restore_path
  character(len=4200), allocatable :: overrides(:)
  character(len=:), allocatable :: saved
  integer :: rank, ranks, trainers, rows, row0, up, down, my_cells, n_fed, first_step, last_step
  integer :: step, status, i, nargs, n_overrides, color, rate_count
  integer :: fed(nc)
  logical :: training, running
  real(real64) :: rate_sum, took, push_sums(4), push_all_sums(4), push_max(2), push_all_max(2)
  real(real64), allocatable :: fine(:, :), coarse(:, :)
  real(c_double) :: context(ncontext, cells), target(nfine, cells)

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, ranks)
  nargs = command_argument_count()
  if (nargs >= 5) then
    call get_command_argument(3, arg)
    read (arg, *) first_step
    call get_command_argument(4, arg)
    read (arg, *) last_step
    call get_command_argument(5, arg)
    read (arg, *) trainers
  end if
  if (nargs < 5) then
    call usage()
  else if (mod(nc, ranks) /= 0 .or. trainers < 1 .or. mod(ranks, max(trainers, 1)) /= 0 .or. first_step < 1 &
           .or. last_step < first_step) then
    call usage()
  end if
  call get_command_argument(1, config)

  ! The layout: my band of rows, its neighbours, whether I train, whom I feed or am fed by.
  rows = nc / ranks
  row0 = rank * rows
  up = modulo(rank - 1, ranks)
  down = modulo(rank + 1, ranks)
  my_cells = rows * nc
  training = rank < trainers
  n_fed = 0
  do i = mod(rank, trainers), ranks - 1, trainers
    n_fed = n_fed + 1
    fed(n_fed) = i
  end do
  allocate (fine(nc * nf, rows * nf), coarse(nc, 0:rows + 1))

  ! The overrides: where the runs go, the per-rank batch and session size, then the command line's.
  restore_path = ''
  allocate (overrides(nargs))
  call get_command_argument(2, arg)
  overrides(1) = 'output_dir=' // trim(arg)
  write (overrides(2), '(a, i0)') 'data.batch_size=', batch / trainers
  write (overrides(3), '(a, i0)') 'data.stream.ready_samples=', every * cells / trainers
  write (overrides(4), '(a, i0)') 'data.stream.capacity=', 2 * every * cells / trainers
  n_overrides = 4
  do i = 6, nargs
    call get_command_argument(i, arg)
    if (i == 6 .and. index(arg, '=') == 0) then
      restore_path = arg
    else
      n_overrides = n_overrides + 1
      overrides(n_overrides) = arg
    end if
  end do

  ! --- the training ranks' communicator and trainer; feeders take no part ---
  color = MPI_UNDEFINED
  if (training) color = 0
  call MPI_Comm_split(MPI_COMM_WORLD, color, rank, training_comm)
  if (training) then
    call bellows_create_mpi(trainer, trim(config), training_comm, status, overrides=overrides(1:n_overrides))
    call check(status, 'bellows_create_mpi')
    if (len_trim(restore_path) > 0) then
      call bellows_restore(trainer, trim(restore_path), status)
      call check(status, 'bellows_restore')
    end if
  end if
  if (rank == 0) then
    write (*, '(a, a, a, i0, a, i0, a, i0, a, i0, a, i0)') 'sim_mpi_f: bellows ', bellows_version(), ', ', ranks, &
      ' ranks (', trainers, ' training), ', cells / trainers, ' cells per training rank per step, steps ', first_step, &
      ' to ', last_step
    if (len_trim(restore_path) > 0) write (*, '(a, a)') 'sim_mpi_f: restarted from ', trim(restore_path)
    flush (6)
  end if

  push_sums = 0
  push_max = 0
  rate_sum = 0
  rate_count = 0
  running = .false.
  do step = first_step, last_step
    ! --- step the model; the halo; this step's samples ---
    call simulate(step)
    call exchange_halo()
    call make_samples(context(:, 1:my_cells), target(:, 1:my_cells))
    if (.not. training) then
      call MPI_Send(context(:, 1:my_cells), ncontext * my_cells, MPI_DOUBLE_PRECISION, fed(1), 10, MPI_COMM_WORLD)
      call MPI_Send(target(:, 1:my_cells), nfine * my_cells, MPI_DOUBLE_PRECISION, fed(1), 11, MPI_COMM_WORLD)
    else
      do i = 2, n_fed
        call MPI_Recv(context(:, (i - 1) * my_cells + 1:i * my_cells), ncontext * my_cells, MPI_DOUBLE_PRECISION, fed(i), 10, &
                      MPI_COMM_WORLD, MPI_STATUS_IGNORE)
        call MPI_Recv(target(:, (i - 1) * my_cells + 1:i * my_cells), nfine * my_cells, MPI_DOUBLE_PRECISION, fed(i), 11, &
                      MPI_COMM_WORLD, MPI_STATUS_IGNORE)
      end do
      took = MPI_Wtime()
      call bellows_push_block(trainer, context(:, 1:n_fed * my_cells), target(:, 1:n_fed * my_cells), status)
      took = MPI_Wtime() - took
      call check(status, 'bellows_push_block')   ! also while a session trains
      if (running) then
        push_sums(1:2) = push_sums(1:2) + [took, 1.0_real64]
        push_max(1) = max(push_max(1), took)
      else
        push_sums(3:4) = push_sums(3:4) + [took, 1.0_real64]
        push_max(2) = max(push_max(2), took)
      end if
    end if
    if (mod(step, every) /= 0) cycle

    ! --- every 48 steps: the finished session, an evaluation, the next session (the run's last synchronously) ---
    if (running) then
      if (training) then
        call bellows_wait(trainer, status)
        call check(status, 'bellows_wait')
      end if
      running = .false.
      call evaluate(step)
    end if
    if (step + every > last_step) then
      if (training) then
        call bellows_train(trainer, 0, status)
        call check(status, 'bellows_train')
      end if
      call evaluate(step)
    else
      if (training) then
        call bellows_train_async(trainer, 0, status)
        call check(status, 'bellows_train_async')
      end if
      running = .true.
    end if
  end do
  if (running .and. training) then
    call bellows_wait(trainer, status)
    call check(status, 'bellows_wait')
  end if

  ! --- a checkpoint (collective), the numbers, the end ---
  if (training) then
    call bellows_save(trainer, status, path=saved)
    call check(status, 'bellows_save')
    call bellows_metrics_get(trainer, metrics, status)
    call check(status, 'bellows_metrics_get')
  end if
  call MPI_Reduce(push_sums, push_all_sums, 4, MPI_DOUBLE_PRECISION, MPI_SUM, 0, MPI_COMM_WORLD)
  call MPI_Reduce(push_max, push_all_max, 2, MPI_DOUBLE_PRECISION, MPI_MAX, 0, MPI_COMM_WORLD)
  if (rank == 0) then
    write (*, '(a, i0, a, i0, a, f8.4, a, i0, a, i0, a)') 'sim_mpi_f: ', metrics%step, ' optimizer steps, ', metrics%sessions, &
      ' sessions, last loss ', metrics%loss, '; ', nint(rate_sum / max(rate_count, 1)), &
      ' samples/s per training rank (mean of ', rate_count, ' sessions'' last logging windows)'
    write (*, '(a, i0, a, i0, a, i0, a, i0, a, i0, a, i0, a)') 'push wait per step: during a session ', &
      nint(1e6_real64 * push_all_sums(1) / max(push_all_sums(2), 1.0_real64)), ' us mean, ', nint(1e6_real64 * push_all_max(1)), &
      ' us max (', nint(push_all_sums(2)), ' steps of the training ranks); without one ', &
      nint(1e6_real64 * push_all_sums(3) / max(push_all_sums(4), 1.0_real64)), ' us mean, ', nint(1e6_real64 * push_all_max(2)), &
      ' us max (', nint(push_all_sums(4)), ' steps)'
    write (*, '(a, a)') 'checkpoint ', saved
  end if
  if (training) then
    call bellows_destroy(trainer, status)
    call check(status, 'bellows_destroy')
    call MPI_Comm_free(training_comm)
  end if
  call MPI_Finalize()

contains

  subroutine usage()
    if (rank == 0) write (error_unit, '(a)') 'usage: mpirun -n RANKS sim_mpi_f CONFIG OUTPUT_DIR FIRST_STEP LAST_STEP ' // &
      'TRAINERS [CHECKPOINT] [key=value ...]  (RANKS divides 8, TRAINERS divides RANKS)'
    call MPI_Finalize()
    stop 2
  end subroutine

  subroutine check(status, what)
    integer, intent(in) :: status
    character(len=*), intent(in) :: what
    if (status /= BELLOWS_OK) then
      write (error_unit, '(a, i0, a, a, a, i0, a, a)') 'sim_mpi_f rank ', rank, ': ', what, ' failed (status ', status, '): ', &
        bellows_last_error()
      call MPI_Abort(MPI_COMM_WORLD, 1)
    end if
  end subroutine

  real(real64) function large_scale(x, y, t)
    real(real64), intent(in) :: x, y, t
    large_scale = sin(2 * pi * (x - 0.8_real64 * t)) * cos(2 * pi * (y - 0.3_real64 * t)) &
                  + 0.5_real64 * sin(2 * pi * (2 * x + y) - 1.3_real64 * t)
  end function

  ! My rows of the fine field, fine(x, local y), and their cell means into coarse(:, 1:rows); sim.f90's numbers.
  subroutine simulate(step)
    integer, intent(in) :: step
    real(real64) :: t, x, y, xl, yl, l
    integer :: gx, gy, ly, i, j, n
    n = nc * nf
    t = 0.01_real64 * step
    do ly = 0, rows * nf - 1
      gy = row0 * nf + ly
      do gx = 0, n - 1
        x = (gx + 0.5_real64) / n
        y = (gy + 0.5_real64) / n
        xl = (mod(gx, nf) + 0.5_real64) / nf
        yl = (mod(gy, nf) + 0.5_real64) / nf
        l = large_scale(x, y, t)
        fine(gx + 1, ly + 1) = real(real(l + 0.8_real64 * tanh(2 * l) * sin(4 * pi * xl) * sin(4 * pi * yl), c_float), real64)
      end do
    end do
    do j = 1, rows
      do i = 1, nc
        coarse(i, j) = sum(fine((i - 1) * nf + 1:i * nf, (j - 1) * nf + 1:j * nf)) / nfine
      end do
    end do
  end subroutine

  ! The halo: my last row goes down while the row above mine comes from up, and my first row goes up while the row
  ! below comes from down (one rank swaps with itself).
  subroutine exchange_halo()
    call MPI_Sendrecv(coarse(:, rows), nc, MPI_DOUBLE_PRECISION, down, 0, coarse(:, 0), nc, MPI_DOUBLE_PRECISION, up, 0, &
                      MPI_COMM_WORLD, MPI_STATUS_IGNORE)
    call MPI_Sendrecv(coarse(:, 1), nc, MPI_DOUBLE_PRECISION, up, 1, coarse(:, rows + 1), nc, MPI_DOUBLE_PRECISION, down, 1, &
                      MPI_COMM_WORLD, MPI_STATUS_IGNORE)
  end subroutine

  integer function wrap(i)
    integer, intent(in) :: i
    wrap = modulo(i - 1, nc) + 1
  end function

  ! My cell (i, local row j) is sample (j - 1) * nc + i: its 7 context values and its fine values row by row.
  subroutine make_samples(ctx, tgt)
    real(c_double), intent(out) :: ctx(ncontext, my_cells), tgt(nfine, my_cells)
    integer :: i, j, a, b, c
    do j = 1, rows
      do i = 1, nc
        c = (j - 1) * nc + i
        ctx(:, c) = [coarse(i, j), coarse(wrap(i + 1), j), coarse(wrap(i - 1), j), coarse(i, j + 1), coarse(i, j - 1), &
                     coarse(wrap(i + 1), j + 1), coarse(wrap(i - 1), j - 1)]
        do a = 0, nf - 1
          do b = 0, nf - 1
            tgt(a * nf + b + 1, c) = fine((i - 1) * nf + b + 1, (j - 1) * nf + a + 1)
          end do
        end do
      end do
    end do
  end subroutine

  ! The bilinear interpolation's squared error over my fine points: coarse rows j0 and j0 + 1 lie in the band and halo.
  real(real64) function baseline_sq()
    real(real64) :: u, v, fu, fv, value
    integer :: gx, gy, ly, i0, j0
    baseline_sq = 0
    do ly = 0, rows * nf - 1
      gy = row0 * nf + ly
      do gx = 0, nc * nf - 1
        u = (gx + 0.5_real64) / nf - 0.5_real64
        v = (gy + 0.5_real64) / nf - 0.5_real64
        i0 = floor(u)
        j0 = floor(v) - row0 + 1         ! the local row, 0 .. rows
        fu = u - floor(u)
        fv = v - floor(v)
        value = (1 - fu) * (1 - fv) * coarse(wrap(i0 + 1), j0) + fu * (1 - fv) * coarse(wrap(i0 + 2), j0) &
                + (1 - fu) * fv * coarse(wrap(i0 + 1), j0 + 1) + fu * fv * coarse(wrap(i0 + 2), j0 + 1)
        baseline_sq = baseline_sq + (value - fine(gx + 1, ly + 1))**2
      end do
    end do
  end function

  ! This step's errors summed over the ranks (every rank calls it): a training rank predicts the cells it pushed, block
  ! by block, each cell drawing from (step, its index in the grid) as one process would; rank 0 prints the line. A model
  ! that draws no samples (a regression, config-equal.yaml) refuses several: one prediction per cell from then on.
  subroutine evaluate(step)
    integer, intent(in) :: step
    logical, save :: one_draw = .false.
    real(real64), allocatable :: samples(:, :, :), single(:, :)
    real(real64) :: mine(2), all(2), per_rank
    type(bellows_metrics) :: m
    integer :: k, first, status
    mine = [0.0_real64, baseline_sq()]
    if (training) then
      allocate (samples(nfine, draws, my_cells), single(nfine, my_cells))
      do k = 1, n_fed
        first = (k - 1) * my_cells
        if (.not. one_draw) then
          call bellows_predict(trainer, context(:, first + 1:first + my_cells), samples, status, seed=step, &
                               first_index=fed(k) * my_cells)
          one_draw = status == BELLOWS_ERR_USAGE
        end if
        if (one_draw) then
          call bellows_predict(trainer, context(:, first + 1:first + my_cells), single, status, seed=step, &
                               first_index=fed(k) * my_cells)
          samples = spread(single, 2, draws)
        end if
        call check(status, 'bellows_predict')
        mine(1) = mine(1) + sum((sum(samples, dim=2) / draws - target(:, first + 1:first + my_cells))**2)
      end do
    end if
    call MPI_Reduce(mine, all, 2, MPI_DOUBLE_PRECISION, MPI_SUM, 0, MPI_COMM_WORLD)
    if (rank /= 0) return
    call bellows_metrics_get(trainer, m, status)
    call check(status, 'bellows_metrics_get')
    per_rank = m%samples_per_second / m%ranks   ! the session's last logging window counts every rank's samples
    rate_sum = rate_sum + per_rank
    rate_count = rate_count + 1
    write (*, '(a, i0, a, i0, a, f7.4, a, f7.4, a, i0)') 'eval step ', step, ' session ', m%sessions, ' rmse ', &
      sqrt(all(1) / (nfine * cells)), ' baseline ', sqrt(all(2) / (nfine * cells)), ' samples/s/rank ', nint(per_rank)
    flush (6)
  end subroutine

end program icon_coupled_mpi
