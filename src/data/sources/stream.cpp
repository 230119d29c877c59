// data.source: stream -- the samples a running program pushed into a StreamBuffer (seed 002: a simulation
// trains on the fields it has just produced). The program hands the buffer to the run; each run trains on
// what the buffer holds when the run starts (StreamBuffer::take).
#include <fmt/format.h>

#include "bellows/data/source_registry.h"
#include "bellows/data/stream_buffer.h"
#include "bellows/util/check.h"

namespace bellows::data {

StreamBufferOptions stream_buffer_options(const config::Config& c) {
  StreamBufferOptions o;
  o.capacity = config::get_int(c, "data.stream.capacity");
  o.when_full = config::get_string(c, "data.stream.when_full");
  o.ready_samples = config::get_int(c, "data.stream.ready_samples");
  return o;
}

namespace {

SourceEntry stream_source() {
  SourceEntry e;
  e.name = "stream";
  e.help = "samples a running program pushed into a stream buffer (C++ or the C API)";
  e.needs_path = false;
  e.has_val_path = false;
  e.temporal = true;
  e.add_keys = [](config::Schema& s) {
    using config::Type;
    auto node = [](auto v) { return YAML::Node(v); };
    s.add("data.stream.capacity", Type::kInt, "stream: samples the buffer holds at most").min(1).default_value(node(65536));
    s.add("data.stream.when_full", Type::kString, "stream: a push into a full buffer drops the oldest sample, blocks, or fails")
        .choices({"drop_oldest", "block", "error"}).default_value(node("drop_oldest"));
    s.add("data.stream.ready_samples", Type::kInt, "stream: samples that make a training session ready (0: capacity)").min(0).default_value(node(0));
    s.add("data.stream.clear", Type::kBool, "stream: empty the buffer when a session takes its samples").default_value(node(true));
  };
  e.open = [](const SourceRequest& r) -> std::shared_ptr<const Dataset> {
    BELLOWS_CHECK_CONFIG(r.stream != nullptr, "data.source is stream, but no program attached a stream buffer to this run",
                         "stream data comes from a program that pushes samples (C++: app::RunOptions::stream); from the "
                         "command line use a file source");
    return r.stream->take(config::get_bool(*r.config, "data.stream.clear"));
  };
  return e;
}

const SourceRegistrar kStreamRegistered(stream_source());

}  // namespace
}  // namespace bellows::data
