! Fortran values as the C API takes them and back, for the module bellows (bellows.f90) and the modules over it:
! C strings, "key=value" overrides, optional numeric keywords of any kind, and failures found before any C call.
! Programs `use bellows`; bellows_pack_overrides is public there, for modules over it such as bellows_mpi.
module bellows_c_conversions
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: int8, int16, int32, int64, real32, real64
  use bellows_c_binding, only: BELLOWS_OK, BELLOWS_ERR_USAGE, c_internal_fail, c_strlen
  implicit none
  private

  public :: from_c, from_buffer, fail, bellows_pack_overrides
  public :: integer_value, real_value, optional_integer, to_int32

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

end module bellows_c_conversions
