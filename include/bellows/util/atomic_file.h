// Durable, atomic file writes: the one way bellows replaces a file (a plan, a checkpoint's weights, an .npy, a
// statistics cache), so that a reader never sees half of it and a crash never leaves a hole after a rename.
// Every form writes a temporary file beside the target (same directory, so the rename cannot cross
// filesystems), fsyncs it, renames it over the target and fsyncs the directory.
//   write_file_atomically(dir / "plan.json", plan.to_json());
//   AtomicFileWriter w(path);  w.write(header);  w.write(data, n);  w.commit();  // streamed
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string_view>

namespace bellows {

// All errors are kResource errors naming the path and the system's reason (errno text); on an error the
// temporary file is removed and the target is left as it was. Filesystems that cannot sync (fsync gives
// EINVAL) are taken as they are.

// `bytes` written to `path` as described above.
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes);

// The streamed form, for writers that produce a file piece by piece (NPY/NPZ, safetensors): construction
// creates the temporary file, write() appends, commit() makes it `path`. Destroyed without commit() (an
// error unwinds), it removes the temporary file.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::filesystem::path path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, std::uint64_t n);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  std::uint64_t offset() const { return offset_; }  // bytes written so far
  void commit();                                    // fsync, close, rename over path(), fsync the directory

  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& temporary_path() const { return tmp_; }

 private:
  void abandon() noexcept;                           // close and remove the temporary file
  [[noreturn]] void fail(const char* what, int error);  // abandon(), then the kResource error
  std::filesystem::path path_, tmp_;
  int fd_ = -1;
  std::uint64_t offset_ = 0;
  bool committed_ = false;
};

// For writers that insist on a path of their own (a library's save(path)): `write` is called with the
// temporary path and must create the file there; it is then fsynced and renamed over `path`. An exception
// from `write` propagates after the temporary file is removed.
void write_file_atomically_via(const std::filesystem::path& path,
                               const std::function<void(const std::filesystem::path& temporary)>& write);

// --- the primitives, for writers of whole directories (a checkpoint: files in a temporary directory, the
// directory fsynced, then renamed into place) ---

// `bytes` written to `path` (created or truncated, not renamed) and fsynced before it returns.
void write_file_synced(const std::filesystem::path& path, std::string_view bytes);
void fsync_file(const std::filesystem::path& path);
void fsync_directory(const std::filesystem::path& dir);
// rename(2) of `from` to `to` (a file or a directory; an existing file `to` is replaced), then fsync of the
// directory holding `to` (and of the one holding `from` when that is another).
void rename_durably(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace bellows
