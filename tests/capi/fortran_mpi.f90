! The Fortran module bellows_mpi from both MPI bindings: the main program with `use mpi_f08` (type(MPI_Comm)), the
! module fortran_mpi_handles with `use mpi` (integer handles), each calling bellows_create_mpi and
! bellows_create_mpi_from_string. Compiling it is half the test. Run (as every rank of MPI_COMM_WORLD):
!   fortran_mpi                 MPI_COMM_NULL is refused (BELLOWS_ERR_USAGE) on every rank, through both bindings
!   fortran_mpi WORK_DIR        also a trainer over MPI_COMM_WORLD from each binding: every rank pushes its samples,
!                               one session trains them (metrics: ranks = the communicator's size), destroy
! e.g. mpirun -np 2 fortran_mpi /tmp/w (as root, Open MPI's mpirun needs OMPI_ALLOW_RUN_AS_ROOT=1 and
! OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1). Stops with a non-zero code on any failed check.

! What both bindings' tests share (no MPI in it).
module fortran_mpi_support
  use, intrinsic :: iso_fortran_env, only: real64, error_unit
  use bellows
  implicit none
  private
  public :: check, check_status, config_text, train_once
  integer, public :: failures = 0

contains

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (ok) return
    failures = failures + 1
    write (error_unit, '(a, a)') 'FAILED: ', what
  end subroutine

  subroutine check_status(status, wanted, what)
    integer, intent(in) :: status, wanted
    character(len=*), intent(in) :: what
    character(len=64) :: got
    write (got, '(a, i0, a, i0, a)') ' (status ', status, ', expected ', wanted, ')'
    call check(status == wanted, what // trim(got) // ' ' // bellows_last_error())
  end subroutine

  ! A small conditional ddpm (3 context values -> 8 values) trained online (tests/capi/capi_test.cpp's).
  function config_text(output_dir, name) result(text)
    character(len=*), intent(in) :: output_dir, name
    character(len=:), allocatable :: text
    character(len=1), parameter :: nl = new_line('a')
    text = 'name: ' // name // nl // 'seed: 0' // nl // 'output_dir: ' // output_dir // nl // &
           'online: {console: none}' // nl // 'data:' // nl // '  source: stream' // nl // &
           '  stream: {capacity: 4096, ready_samples: 64}' // nl // '  batch_size: 32' // nl // &
           '  val_fraction: 0' // nl // &
           'model: {name: ddpm, context_features: 3, out_features: 8, hidden: 16, steps: 10}' // nl // &
           'train: {epochs: 2}' // nl // 'schedule: {type: constant}' // nl // 'dist: {timeout_s: 60}' // nl
  end function

  ! Every rank pushes 64 samples of its own; one session (collective) trains them; then the trainer goes.
  subroutine train_once(t, rank, size, what)
    type(bellows_trainer), intent(inout) :: t
    integer, intent(in) :: rank, size
    character(len=*), intent(in) :: what
    type(bellows_metrics) :: m
    real(real64) :: x(3, 64), y(8, 64)
    integer :: i, j, status
    do i = 1, 64
      do j = 1, 3
        x(j, i) = sin(0.1_real64 * (rank * 192 + (i - 1) * 3 + j))
      end do
      do j = 1, 8
        y(j, i) = x(mod(j - 1, 3) + 1, i)
      end do
    end do
    call bellows_push_block(t, x, y, status)
    call check_status(status, BELLOWS_OK, what // ': bellows_push_block')
    call bellows_train(t, 0, status)
    call check_status(status, BELLOWS_OK, what // ': bellows_train')
    call bellows_metrics_get(t, m, status)
    call check(status == BELLOWS_OK .and. m%ranks == size .and. m%rank == rank .and. m%step > 0, &
               what // ': metrics name the job (ranks, rank) and its steps')
    call bellows_destroy(t, status)
    call check_status(status, BELLOWS_OK, what // ': bellows_destroy')
  end subroutine

end module fortran_mpi_support

! The `use mpi` binding: integer handles (in a module of its own: mpi and mpi_f08 do not mix in one scope).
module fortran_mpi_handles
  use, intrinsic :: iso_c_binding, only: c_associated
  use mpi
  use bellows
  use bellows_mpi
  use fortran_mpi_support
  implicit none
  private
  public :: with_mpi_handles

contains

  subroutine with_mpi_handles(work)
    character(len=*), intent(in) :: work
    type(bellows_trainer) :: t
    integer :: status, rank, size, ierror
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierror)
    call MPI_Comm_size(MPI_COMM_WORLD, size, ierror)
    call bellows_create_mpi(t, 'unused.yaml', MPI_COMM_NULL, status, overrides=['seed=1'])
    call check_status(status, BELLOWS_ERR_USAGE, 'mpi: bellows_create_mpi(MPI_COMM_NULL)')
    call bellows_create_mpi_from_string(t, 'unused: 1', MPI_COMM_NULL, status)
    call check_status(status, BELLOWS_ERR_USAGE, 'mpi: bellows_create_mpi_from_string(MPI_COMM_NULL)')
    call check(.not. c_associated(t%handle), 'mpi: no trainer')
    if (len(work) == 0) return
    call bellows_create_mpi_from_string(t, config_text(work // '/runs', 'fortran_mpi_handle'), MPI_COMM_WORLD, status)
    call check_status(status, BELLOWS_OK, 'mpi: bellows_create_mpi_from_string(MPI_COMM_WORLD)')
    if (status == BELLOWS_OK) call train_once(t, rank, size, 'mpi')
  end subroutine

end module fortran_mpi_handles

! The `use mpi_f08` binding: type(MPI_Comm).
program fortran_mpi
  use, intrinsic :: iso_c_binding, only: c_associated
  use, intrinsic :: iso_fortran_env, only: error_unit
  use mpi_f08
  use bellows
  use bellows_mpi
  use fortran_mpi_support
  use fortran_mpi_handles
  implicit none

  type(bellows_trainer) :: t
  character(len=4096) :: work
  integer :: status, rank, size

  work = ''
  if (command_argument_count() >= 1) call get_command_argument(1, work)
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, size)

  call bellows_create_mpi(t, 'unused.yaml', MPI_COMM_NULL, status)
  call check_status(status, BELLOWS_ERR_USAGE, 'mpi_f08: bellows_create_mpi(MPI_COMM_NULL)')
  call bellows_create_mpi_from_string(t, 'unused: 1', MPI_COMM_NULL, status, overrides=['seed=1'])
  call check_status(status, BELLOWS_ERR_USAGE, 'mpi_f08: bellows_create_mpi_from_string(MPI_COMM_NULL)')
  call check(.not. c_associated(t%handle), 'mpi_f08: no trainer')
  if (len_trim(work) > 0) then
    call bellows_create_mpi(t, write_config(trim(work), 'f08', rank), MPI_COMM_WORLD, status, &
                            overrides=['train.epochs=1'])
    call check_status(status, BELLOWS_OK, 'mpi_f08: bellows_create_mpi(MPI_COMM_WORLD)')
    if (status == BELLOWS_OK) call train_once(t, rank, size, 'mpi_f08')
  end if

  call with_mpi_handles(trim(work))

  call MPI_Finalize()
  if (failures > 0) then
    write (error_unit, '(a, i0, a, i0, a)') 'rank ', rank, ': ', failures, ' checks failed'
    stop 1
  end if
  if (rank == 0) write (*, '(a)') 'fortran_mpi: every check passed'

contains

  ! This rank's copy of the config file (every rank writes its own: no two write one file).
  function write_config(work, name, rank) result(path)
    character(len=*), intent(in) :: work, name
    integer, intent(in) :: rank
    character(len=:), allocatable :: path
    character(len=16) :: suffix
    integer :: unit
    write (suffix, '(i0)') rank
    path = work // '/fortran_mpi_' // name // '_rank' // trim(suffix) // '.yaml'
    open (newunit=unit, file=path, status='replace', action='write', access='stream', form='unformatted')
    write (unit) config_text(work // '/runs', 'fortran_mpi_' // name)
    close (unit)
  end function

end program fortran_mpi
