! The bellows_mpi Fortran module: a trainer whose training ranks are an MPI communicator's processes, over the C
! calls of bellows/bellows_c_mpi.h (libbellows_c_mpi). Use it beside the module bellows, which has everything else:
!
!   use mpi_f08                        ! or: use mpi (integer communicator handles); both work
!   use bellows
!   use bellows_mpi
!   call bellows_create_mpi(t, "online.yaml", MPI_COMM_WORLD, status)
!
! Every rank of comm calls it (a collective over comm); its rank 0 picks a free TCP port and one broadcast tells the
! others where to meet; after that bellows makes no MPI call. MPI must be initialised. The argument order is the
! module bellows' (bellows.f90): trainer, inputs, status, then optional arguments by keyword. docs/c_api.md.
module bellows_mpi
  use, intrinsic :: iso_c_binding, only: c_char, c_int, c_int32_t, c_null_char, c_ptr
  use mpi_f08, only: MPI_Comm
  use bellows, only: bellows_trainer, bellows_pack_overrides
  implicit none
  private

  public :: bellows_create_mpi, bellows_create_mpi_from_string

  ! comm: type(MPI_Comm) (use mpi_f08) or a default integer handle (use mpi).
  interface bellows_create_mpi
    module procedure create_mpi_f08, create_mpi_handle
  end interface
  interface bellows_create_mpi_from_string
    module procedure create_mpi_from_string_f08, create_mpi_from_string_handle
  end interface

  interface
    function c_create_mpi_f(path, overrides, n, comm, out) bind(c, name="bellows_create_mpi_f") result(s)
      import :: c_char, c_ptr, c_int, c_int32_t
      character(kind=c_char), intent(in) :: path(*)
      type(c_ptr), value :: overrides
      integer(c_int32_t), value :: n
      integer(c_int), value :: comm   ! MPI_Fint
      type(c_ptr), intent(out) :: out
      integer(c_int) :: s
    end function
    function c_create_mpi_from_string_f(yaml, overrides, n, comm, out) bind(c, name="bellows_create_mpi_from_string_f") &
        result(s)
      import :: c_char, c_ptr, c_int, c_int32_t
      character(kind=c_char), intent(in) :: yaml(*)
      type(c_ptr), value :: overrides
      integer(c_int32_t), value :: n
      integer(c_int), value :: comm
      type(c_ptr), intent(out) :: out
      integer(c_int) :: s
    end function
  end interface

contains

  ! Both creates with comm's Fortran handle: the config (a file's path when from_file, else YAML text), overrides.
  subroutine create_over(trainer, text, from_file, comm, status, overrides)
    type(bellows_trainer), intent(out) :: trainer
    character(len=*), intent(in) :: text
    logical, intent(in) :: from_file
    integer, intent(in) :: comm
    integer, intent(out) :: status
    character(len=*), intent(in), optional :: overrides(:)
    character(kind=c_char), allocatable, target :: pool(:)
    type(c_ptr), allocatable, target :: pointers(:)
    type(c_ptr) :: array
    integer(c_int32_t) :: n
    call bellows_pack_overrides(pool, pointers, array, n, overrides)
    if (from_file) then
      status = int(c_create_mpi_f(trim(text) // c_null_char, array, n, int(comm, c_int), trainer%handle))
    else
      status = int(c_create_mpi_from_string_f(text // c_null_char, array, n, int(comm, c_int), trainer%handle))
    end if
  end subroutine

  ! A trainer from a YAML config file, as this process's rank of comm, with optional "key=value" overrides.
  subroutine create_mpi_f08(trainer, config_path, comm, status, overrides)
    type(bellows_trainer), intent(out) :: trainer
    character(len=*), intent(in) :: config_path
    type(MPI_Comm), intent(in) :: comm
    integer, intent(out) :: status
    character(len=*), intent(in), optional :: overrides(:)
    call create_over(trainer, config_path, .true., comm%MPI_VAL, status, overrides)
  end subroutine

  subroutine create_mpi_handle(trainer, config_path, comm, status, overrides)
    type(bellows_trainer), intent(out) :: trainer
    character(len=*), intent(in) :: config_path
    integer, intent(in) :: comm
    integer, intent(out) :: status
    character(len=*), intent(in), optional :: overrides(:)
    call create_over(trainer, config_path, .true., comm, status, overrides)
  end subroutine

  ! The same from YAML text.
  subroutine create_mpi_from_string_f08(trainer, yaml, comm, status, overrides)
    type(bellows_trainer), intent(out) :: trainer
    character(len=*), intent(in) :: yaml
    type(MPI_Comm), intent(in) :: comm
    integer, intent(out) :: status
    character(len=*), intent(in), optional :: overrides(:)
    call create_over(trainer, yaml, .false., comm%MPI_VAL, status, overrides)
  end subroutine

  subroutine create_mpi_from_string_handle(trainer, yaml, comm, status, overrides)
    type(bellows_trainer), intent(out) :: trainer
    character(len=*), intent(in) :: yaml
    integer, intent(in) :: comm
    integer, intent(out) :: status
    character(len=*), intent(in), optional :: overrides(:)
    call create_over(trainer, yaml, .false., comm, status, overrides)
  end subroutine

end module bellows_mpi
