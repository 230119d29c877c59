// data.source: stream -- the samples a running program pushed into a StreamBuffer (seed 002: a simulation
// trains on the fields it has just produced). The program hands the buffer to the run; each run trains on
// what the buffer holds when the run starts (StreamBuffer::take).
#include <fmt/format.h>

#include "bellows/config/binding.h"  // defines: Binding
#include "bellows/data/source_registry.h"
#include "bellows/data/stream_buffer.h"
#include "bellows/util/check.h"

namespace bellows::data {

namespace {

// The data.stream.* keys of StreamBufferOptions, bound once (config/binding.h); clear is how a session takes the
// samples (StreamBuffer::take), check_finite the online trainer's check of a push.
const config::Binding<StreamBufferOptions>& stream_binding() {
  using O = StreamBufferOptions;
  return config::bound<O>("data.stream.", [](config::Binding<O>& b) {
    b.key("capacity", &O::capacity, "stream: samples the buffer holds at most").min(1);
    b.key("when_full", &O::when_full, "stream: a push into a full buffer drops the oldest sample, blocks, or fails")
        .choices({"drop_oldest", "block", "error"});
    b.key("ready_samples", &O::ready_samples, "stream: samples that make a training session ready (0: capacity)").min(0);
    b.key("clear", &O::clear, "stream: empty the buffer when a session takes its samples");
    b.key("check_finite", &O::check_finite,
          "stream: a push refuses samples with NaN or Inf values (counted; the error names the tensor and the sample)");
  });
}

}  // namespace

StreamBufferOptions stream_buffer_options(const config::Config& c) { return stream_binding().read(c); }

namespace {

SourceEntry stream_source() {
  SourceEntry e;
  e.name = "stream";
  e.help = "samples a running program pushed into a stream buffer (C++ or the C API)";
  e.needs_path = false;
  e.has_val_path = false;
  e.temporal = true;
  e.add_keys = [](config::Schema& s) { stream_binding().declare(s); };
  e.open = [](const SourceRequest& r) -> std::shared_ptr<const Dataset> {
    BELLOWS_CHECK_CONFIG(r.stream != nullptr, "data.source is stream, but no program attached a stream buffer to this run",
                         "stream data comes from a program that pushes samples (C++: app::RunOptions::stream); from the "
                         "command line use a file source");
    return r.stream->take(stream_buffer_options(*r.config).clear);
  };
  return e;
}

const SourceRegistrar kStreamRegistered(stream_source());

}  // namespace
}  // namespace bellows::data
