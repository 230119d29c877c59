// Data parallel over c10d; see ddp.h.
#include "bellows/dist/ddp.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/headeronly/version.h>  // TORCH_VERSION_MINOR: the API differences of 2.11 to 2.13

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <tuple>

#include "bellows/util/check.h"
#include "dist/backend.h"
#include "dist/gradient_hooks.h"

namespace bellows::dist {
namespace {

std::chrono::milliseconds to_ms(double seconds) { return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000)); }

// Returns once a TCP connection to addr:port succeeds, or after timeout_s (TCPStore then reports the failure).
void wait_until_listening(const std::string& addr, int port, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + to_ms(timeout_s);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  while (std::chrono::steady_clock::now() < deadline) {
    addrinfo* found = nullptr;
    if (getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &found) == 0) {
      bool connected = false;
      for (addrinfo* a = found; a != nullptr && !connected; a = a->ai_next) {
        const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        connected = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
        close(fd);
      }
      freeaddrinfo(found);
      if (connected) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

struct Ddp::Impl {
  ProcessInfo info;
  DdpOptions options;
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> group;
  c10::intrusive_ptr<c10d::Backend> params_group;  // DdpOptions::parameter_group

  struct Bucket {
    std::vector<std::size_t> members;  // indices into params
    int owner = -1;                    // reduce_to_owners: the rank the bucket is reduced to; -1 all-reduced
    at::Tensor flat;                   // undefined between steps where another rank owns the bucket
    std::vector<at::Tensor> views;     // one per member, shaped like its parameter
    std::size_t ready = 0;
    c10::intrusive_ptr<c10d::Work> work;
  };
  std::vector<int> owners;  // reduce_to_owners(), per parameter; empty: all-reduce
  std::vector<at::Tensor> params;
  std::vector<std::size_t> bucket_of;
  std::vector<char> ready;
  std::vector<Bucket> buckets;
  std::size_t next_launch = 0;
  std::size_t launched_in_backward = 0;  // in the current backward
  Stats last;
  // Timing of communication (metrics()): per step, first launch to last completion, and the wait after backward.
  // Gloo: host clocks (its work runs on the host). NCCL: CUDA events on the compute stream (launching is not
  // communicating): at the first launch, after backward, after the stream-ordered waits; read when they are done.
  using Clock = std::chrono::steady_clock;
  Clock::time_point first_launch;
  std::atomic<std::int64_t> last_done_ns{0};
  struct StepEvents {
    c10::Event start{c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT};
    c10::Event backward_done{c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT};
    c10::Event done{c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT};
  };
  std::unique_ptr<StepEvents> recording;  // this step's, from its first launch
  std::deque<std::unique_ptr<StepEvents>> pending;
  double comm_s = 0, wait_s = 0;
  std::int64_t timed_steps = 0;
  // agree(): the flags in flight and their all-reduce.
  at::Tensor agreement_flags;
  c10::intrusive_ptr<c10d::Work> agreement;
  GradientHooks hooks;  // one per parameter: its gradient is ready

  // NCCL runs its collectives on its own CUDA streams: waiting for one makes the current stream wait (no host
  // block), and a collective that never completes is the process group's watchdog's to report (its timeout is
  // dist.timeout_s). Gloo's run on the host: waited for there, with the timeout.
  bool on_device() const { return options.backend == "nccl"; }

  c10::Stream current_stream() const {
    const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
    return cuda.getStream(cuda.getDevice());
  }

  // Step timings whose events are done (all of them with `all`, waiting for the last).
  void harvest(bool all) {
    while (!pending.empty() && (all || pending.front()->done.query())) {
      StepEvents& e = *pending.front();
      e.done.synchronize();
      comm_s += e.start.elapsedTime(e.done) / 1e3;
      wait_s += e.backward_done.elapsedTime(e.done) / 1e3;
      ++timed_steps;
      pending.pop_front();
    }
  }

  std::string where() const { return fmt::format("rank {} of {}", info.rank, info.world_size); }
  int failures = 0;  // collectives that failed: each one's marks in the store (unanswered)

  // After a failed collective: which ranks still answer. Each rank that fails marks itself in the store and waits a
  // little (a tenth of dist.timeout_s, 2 s at most) for the others' marks: ranks that lost a peer fail within
  // milliseconds of each other, so those without a mark stopped, crashed or hang.
  // The store is rank 0's: where it cannot be reached, rank 0 is the one lost.
  std::string unanswered() {
    if (!store) return "";
    const std::string prefix = fmt::format("bellows/failed/{}/", ++failures);
    try {
      store->set(prefix + std::to_string(info.rank), std::vector<std::uint8_t>{1});
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(std::min(2.0, options.timeout_s / 10) * 1e3));
      std::vector<int> missing;
      for (;;) {
        missing.clear();
        for (int r = 0; r < info.world_size; ++r) {
          if (!store->check({prefix + std::to_string(r)})) missing.push_back(r);
        }
        if (missing.empty() || std::chrono::steady_clock::now() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (missing.empty()) return "";
      return fmt::format("; rank{} {} did not answer: lost (stopped, crashed or hung)", missing.size() > 1 ? "s" : "", fmt::join(missing, ", "));
    } catch (const std::exception&) {
      return info.rank == 0 ? "" : "; rank 0, which serves the job's rendezvous, cannot be reached: lost (stopped or crashed)";
    }
  }

  // Waits for a collective; a failure or a timeout becomes an error naming the operation, this rank and the ranks lost.
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) {
    try {
      if (on_device()) {
        work->wait();  // stream-ordered (see on_device)
      } else {
        work->wait(to_ms(options.timeout_s));
      }
    } catch (const std::exception& e) {
      const std::string lost = unanswered();
      BELLOWS_FAIL(ErrorKind::kResource,
                   fmt::format("{}: {} failed: {}{} (another rank stopped, crashed or hangs; dist.timeout_s is {})", where(), what,
                               first_line(e), lost, options.timeout_s),
                   "look for the first rank that reported an error; the last complete checkpoint stays valid");
    }
  }

  // The bucket's flat buffer and a view of it per member (the parameter's sizes and strides: channels_last
  // weights stay channels_last).
  void allocate(Bucket& b) const {
    std::int64_t total = 0;
    for (const std::size_t n : b.members) total += params[n].numel();
    const at::Tensor& first = params[b.members.front()];
    b.flat = at::zeros({total}, first.options().requires_grad(false));
    b.views.clear();
    std::int64_t offset = 0;
    for (const std::size_t n : b.members) {
      const at::Tensor& p = params[n];
      b.views.push_back(b.flat.narrow(0, offset, p.numel()).as_strided(p.sizes(), p.strides()));
      offset += p.numel();
    }
  }

  bool kept_here(const Bucket& b) const { return b.owner < 0 || b.owner == info.rank; }

  void launch(Bucket& b) {
    if (!b.flat.defined()) allocate(b);  // another rank's bucket, released after the last step
    for (std::size_t k = 0; k < b.members.size(); ++k) {
      at::Tensor param = params[b.members[k]];
      const at::Tensor& grad = param.grad();
      at::Tensor& view = b.views[k];
      if (!grad.defined()) view.zero_();           // unused in this step on this rank: contributes nothing
      else if (!grad.is_same(view)) view.copy_(grad);  // accumulated in place into the view already otherwise
      if (!kept_here(b)) param.mutable_grad().reset();  // the bucket holds it now; its owner gets the sum
    }
    std::vector<at::Tensor> tensors{b.flat};
    if (&b == &buckets.front()) {  // buckets start in index order
      first_launch = Clock::now();
      if (on_device()) {
        recording = std::make_unique<StepEvents>();
        recording->start.record(current_stream());
      }
    }
    if (b.owner < 0) {
      b.work = group->allreduce(tensors);
    } else {
      c10d::ReduceOptions o;
      o.rootRank = b.owner;
      b.work = group->reduce(tensors, o);
    }
    // When it completes (on Gloo's or NCCL's thread): the latest completion of the step.
    std::atomic<std::int64_t>* done = &last_done_ns;
    b.work->getFuture()->addCallback([done](c10::ivalue::Future&) {
      const std::int64_t now = Clock::now().time_since_epoch().count();
      std::int64_t seen = done->load();
      while (seen < now && !done->compare_exchange_weak(seen, now)) {
      }
    });
  }

  void on_gradient(std::size_t i) {
    if (ready[i]) return;
    ready[i] = 1;
    Bucket& b = buckets[bucket_of[i]];
    ++b.ready;
    // In index order only: every rank issues the same collectives in the same order.
    while (next_launch < buckets.size() && buckets[next_launch].ready == buckets[next_launch].members.size()) {
      launch(buckets[next_launch++]);
      ++launched_in_backward;
    }
  }

  // Where the small control collectives (meters, agreement flags, broadcast text) run: NCCL takes CUDA tensors
  // only ("Tensors must be CUDA and dense"), so on the rank's GPU there; on the CPU for Gloo. Callers pass tensors
  // on any device and get the result in place.
  // The rank's GPU is the process's current CUDA device (plan::apply sets it before the strategy starts).
  c10::Device control_device() const {
    return on_device() ? c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getDevice() : c10::Device(c10::kCPU);
  }

  // Rank 0's values into `tensors` on every rank, one broadcast per dtype and device: flattened into one tensor
  // and copied back (parameters included: the copy is not recorded by autograd).
  void broadcast_from_main(const std::vector<at::Tensor>& tensors) {
    std::map<std::pair<at::ScalarType, std::string>, std::vector<at::Tensor>> groups;
    for (const auto& t : tensors) {
      if (t.defined() && t.numel() > 0) groups[{t.scalar_type(), t.device().str()}].push_back(t);
    }
    torch::NoGradGuard no_grad;
    for (auto& [key, group_tensors] : groups) {
      std::vector<at::Tensor> parts;
      for (const auto& t : group_tensors) parts.push_back(t.reshape({-1}));
      std::vector<at::Tensor> flat{at::cat(parts)};
      c10d::BroadcastOptions o;
      o.rootRank = 0;
      wait(group->broadcast(flat, o), "broadcast from rank 0");
      std::int64_t offset = 0;
      for (auto t : group_tensors) {
        t.copy_(flat[0].narrow(0, offset, t.numel()).view(t.sizes()));
        offset += t.numel();
      }
    }
  }

};

namespace {

// Every rank announces its config's hash and reads every other's; a difference is a config error on every rank. Rank 0
// serves the store: before it fails, it waits (a few seconds at most) until every rank has read the hashes, so that
// they fail with the difference too, not with a store gone away mid-read (seen under load).
void agree_on_config(c10d::Store& store, const ProcessInfo& info, const std::string& hash, const std::string& where,
                     const std::string& at, double timeout_s) {
  store.set(fmt::format("bellows/config/{}", info.rank), std::vector<std::uint8_t>(hash.begin(), hash.end()));
  std::optional<std::pair<int, std::string>> differing;  // the first rank whose hash differs, and its hash
  for (int r = 0; r < info.world_size && !differing; ++r) {
    std::vector<std::uint8_t> theirs;
    try {
      theirs = store.get(fmt::format("bellows/config/{}", r));
    } catch (const std::exception& e) {
      BELLOWS_FAIL(ErrorKind::kResource, fmt::format("{}: rank {} did not announce its config at {}: {}", where, r, at, first_line(e)),
                   "check that every rank was started");
    }
    if (std::string(theirs.begin(), theirs.end()) != hash) differing.emplace(r, std::string(theirs.begin(), theirs.end()));
  }
  if (!differing) return;
  const std::int64_t read = store.add("bellows/config_read", 1);
  if (info.rank == 0) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::min(timeout_s, 10.0));
    for (std::int64_t n = read; n < info.world_size && std::chrono::steady_clock::now() < until; n = store.add("bellows/config_read", 0)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  BELLOWS_FAIL(ErrorKind::kConfig,
               fmt::format("rank {} was started with a different config than rank {} (config hashes {} and {})", differing->first,
                           info.rank, differing->second, hash),
               "start every rank with the same config file and the same key=value overrides");
}

}  // namespace

Ddp::Ddp(const ProcessInfo& info, DdpOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.info = info;
  m.options = std::move(options);
  BELLOWS_CHECK_CONFIG(m.options.bucket_mb > 0, fmt::format("dist.bucket_mb is {}, expected > 0", m.options.bucket_mb),
                       "set dist.bucket_mb (PyTorch's DDP uses 25)");
  BELLOWS_CHECK_CONFIG(m.options.timeout_s > 0, fmt::format("dist.timeout_s is {}, expected > 0", m.options.timeout_s),
                       "set dist.timeout_s to the longest a rank may wait for the others");
  // --- rendezvous: rank 0 serves the store, every rank connects; the server waits for all of them ---
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(info.master_port);
  so.isServer = info.rank == 0;
  so.numWorkers = static_cast<std::size_t>(info.world_size);
  so.waitWorkers = true;
  so.timeout = to_ms(m.options.timeout_s);
  const std::string at = fmt::format("{}:{}", info.master_addr, info.master_port);
  // A rank that starts before rank 0 listens: TCPStore's client backs off for up to ~30 s after a refused
  // connection, so wait here until the port accepts, polling every 50 ms.
  if (info.rank != 0) wait_until_listening(info.master_addr, info.master_port, m.options.timeout_s);
  try {
    m.store = c10::make_intrusive<c10d::TCPStore>(info.master_addr, so);
  } catch (const std::exception& e) {
    const std::string why = first_line(e);
    if (info.rank == 0) {
      BELLOWS_FAIL(ErrorKind::kResource,
                   fmt::format("rank 0 of {} could not open the rendezvous at {}: {}", info.world_size, at, why),
                   "the port may be in use (another job?): choose another one with --master-port or MASTER_PORT, and check that "
                   "every rank was started (a missing rank makes rank 0 wait dist.timeout_s)");
    }
    BELLOWS_FAIL(ErrorKind::kResource,
                 fmt::format("rank {} of {} could not join the rendezvous at {} within {} s: {}", info.rank, info.world_size, at,
                             m.options.timeout_s, why),
                 "check that rank 0 is running, that MASTER_ADDR/MASTER_PORT name its host and a free port, and that the nodes "
                 "can reach each other");
  }
  // --- ranks started with different configs would train different things: stop them all ---
  if (!m.options.config_hash.empty()) agree_on_config(*m.store, info, m.options.config_hash, m.where(), at, m.options.timeout_s);
  m.group = make_backend(m.options.backend, m.store, info.rank, info.world_size, to_ms(m.options.timeout_s));
  if (m.options.parameter_group) open_parameter_group();
}

void Ddp::open_parameter_group() {
  Impl& m = *impl_;
  if (m.params_group) return;
  m.params_group = make_backend(m.options.backend, c10::make_intrusive<c10d::PrefixStore>("bellows/params", m.store), m.info.rank,
                                m.info.world_size, to_ms(m.options.timeout_s));
  m.options.parameter_group = true;
}

Ddp::~Ddp() {
  if (!impl_) return;
  impl_->hooks.clear();
  // A process group shut down before it goes: NCCL's otherwise warns at every exit that it was destroyed without
  // destroy_process_group(), and its watchdog may still be polling. Errors here have nobody to reach.
  for (auto* group : {&impl_->params_group, &impl_->group}) {
    if (!*group) continue;
    try {
      (*group)->shutdown();
    } catch (...) {
    }
  }
}

std::int64_t Ddp::gradient_buffer_bytes() const {
  std::int64_t bytes = 0;
  for (const Impl::Bucket& b : impl_->buckets) {
    if (b.flat.defined()) bytes += static_cast<std::int64_t>(b.flat.nbytes());
  }
  return bytes;
}

int Ddp::rank() const { return impl_->info.rank; }
int Ddp::world_size() const { return impl_->info.world_size; }
int Ddp::local_rank() const { return impl_->info.local_rank; }

std::string Ddp::describe() const {
  const Impl& m = *impl_;
  return fmt::format("{} processes, {} ({} on this node), buckets of {:g} MiB, timeout {:g} s; rank {} via {}", m.info.world_size,
                     m.options.backend, m.info.local_world_size, m.options.bucket_mb, m.options.timeout_s, m.info.rank, m.info.launcher);
}

void Ddp::setup(torch::nn::Module& model, const std::vector<at::Tensor>& params) {
  Impl& m = *impl_;
  m.hooks.clear();
  if (m.agreement) {  // a previous fit's last decisions: done with
    m.wait(m.agreement, "agreement on stop and checkpoint decisions");
    m.agreement.reset();
  }
  // --- replicas made equal: rank 0's parameters and buffers, every tensor of the module ---
  std::vector<at::Tensor> state = model.parameters();
  for (const auto& b : model.buffers()) state.push_back(b);
  m.broadcast_from_main(state);
  // --- buckets: last parameter first, split by dtype/device, owner (reduce_to_owners) and capacity. One bucket
  // is open per (owner, dtype, device); a parameter that would overflow its bucket closes it and opens another. ---
  BELLOWS_CHECK(m.owners.empty() || m.owners.size() == params.size(),
                fmt::format("reduce_to_owners() gave {} owners for {} parameters", m.owners.size(), params.size()),
                "pass one owner per trainable parameter");
  m.params = params;
  m.buckets.clear();
  m.bucket_of.assign(params.size(), 0);
  m.ready.assign(params.size(), 0);
  const auto cap = static_cast<std::int64_t>(m.options.bucket_mb * 1024 * 1024);
  std::map<std::tuple<int, int, std::string>, std::pair<std::size_t, std::int64_t>> open;  // -> bucket, bytes
  for (std::size_t n = params.size(); n-- > 0;) {
    const at::Tensor& p = params[n];
    BELLOWS_CHECK(p.requires_grad() && p.is_leaf(), fmt::format("parameter {} of setup() is not a trainable leaf", n),
                  "pass the trainable parameters");
    BELLOWS_CHECK(p.is_non_overlapping_and_dense(), fmt::format("parameter {} of setup() is not dense", n), "report this bug");
    const int owner = m.owners.empty() ? -1 : m.owners[n];
    const std::int64_t size = p.numel() * static_cast<std::int64_t>(p.element_size());
    const auto key = std::make_tuple(owner, static_cast<int>(p.scalar_type()), p.device().str());
    auto it = open.find(key);
    if (it == open.end() || it->second.second + size > cap) {
      m.buckets.emplace_back();
      m.buckets.back().owner = owner;
      it = open.insert_or_assign(key, std::make_pair(m.buckets.size() - 1, std::int64_t{0})).first;
    }
    m.bucket_of[n] = it->second.first;
    m.buckets[it->second.first].members.push_back(n);
    it->second.second += size;
  }
  for (auto& b : m.buckets) {
    if (m.kept_here(b)) m.allocate(b);  // another rank's: allocated when it is launched, released after the reduce
  }
  // --- a hook on every gradient accumulator ---
  for (std::size_t n = 0; n < params.size(); ++n) {
    m.hooks.add(params[n], [this, n] {
      if (syncing()) impl_->on_gradient(n);
    });
  }
  m.launched_in_backward = 0;
  m.last = {};
}

void Ddp::sync_buffers(torch::nn::Module& model) {
  if (impl_->options.broadcast_buffers) impl_->broadcast_from_main(model.buffers());
}

void Ddp::finish_gradients() {
  Impl& m = *impl_;
  const std::size_t in_backward = m.launched_in_backward;
  while (m.next_launch < m.buckets.size()) m.launch(m.buckets[m.next_launch++]);
  const double world = static_cast<double>(m.info.world_size);
  const auto wait_start = Impl::Clock::now();
  if (m.recording) m.recording->backward_done.record(m.current_stream());
  for (auto& b : m.buckets) m.wait(b.work, b.owner < 0 ? std::string("gradient all-reduce") : fmt::format("gradient reduce to rank {}", b.owner));
  if (m.recording) {
    m.recording->done.record(m.current_stream());
    m.pending.push_back(std::move(m.recording));
    m.harvest(/*all=*/false);
  } else {
    const auto waited = Impl::Clock::now() - wait_start;
    const Impl::Clock::time_point done{Impl::Clock::duration(m.last_done_ns.load())};
    m.wait_s += std::chrono::duration<double>(waited).count();
    m.comm_s += std::chrono::duration<double>(std::max(done, m.first_launch) - m.first_launch).count();
    ++m.timed_steps;
  }
  m.last_done_ns.store(0);
  for (auto& b : m.buckets) {
    if (m.kept_here(b)) {
      b.flat.div_(world);
      for (std::size_t k = 0; k < b.members.size(); ++k) m.params[b.members[k]].mutable_grad() = b.views[k];
    } else {  // reduced to its owner: launch() dropped the members' gradients, and the bucket goes now
      b.flat = at::Tensor();
      b.views.clear();
    }
    b.ready = 0;
    b.work.reset();
  }
  std::fill(m.ready.begin(), m.ready.end(), 0);
  m.next_launch = 0;
  m.launched_in_backward = 0;
  m.last = {m.buckets.size(), in_backward};
}

Ddp::Stats Ddp::last_stats() const { return impl_->last; }

void Ddp::reduce_to_owners(std::vector<int> owners) {
  for (const int o : owners) {
    BELLOWS_CHECK(o >= 0 && o < impl_->info.world_size, fmt::format("reduce_to_owners: owner {} of a {}-rank job", o, impl_->info.world_size),
                  "report this bug");
  }
  impl_->owners = std::move(owners);
}

std::vector<std::pair<std::string, double>> Ddp::metrics() {
  Impl& m = *impl_;
  m.harvest(/*all=*/true);
  if (m.timed_steps == 0) return {};
  const double n = static_cast<double>(m.timed_steps);
  std::vector<std::pair<std::string, double>> out{{"comm_ms", 1e3 * m.comm_s / n}, {"comm_wait_ms", 1e3 * m.wait_s / n}};
  m.comm_s = m.wait_s = 0;
  m.timed_steps = 0;
  return out;
}

void Ddp::all_reduce_sum(std::vector<at::Tensor>& tensors, const std::string& what) {
  for (auto& t : tensors) {
    at::Tensor c = t.to(impl_->control_device()).contiguous();
    std::vector<at::Tensor> one{c};
    impl_->wait(impl_->group->allreduce(one), "all-reduce of " + what);
    if (!c.is_same(t)) t.copy_(c);
  }
}

void Ddp::broadcast(std::vector<at::Tensor>& tensors, int root) {
  for (auto& t : tensors) {
    at::Tensor c = t.to(impl_->control_device()).contiguous();
    std::vector<at::Tensor> one{c};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    impl_->wait(impl_->group->broadcast(one, o), fmt::format("broadcast from rank {}", root));
    if (!c.is_same(t)) t.copy_(c);
  }
}

std::unique_ptr<Ddp::Pending> Ddp::broadcast_parameters(at::Tensor flat, int root, std::string what) {
  Impl& m = *impl_;
  BELLOWS_CHECK(m.params_group, "Ddp::broadcast_parameters() without DdpOptions::parameter_group", "report this bug");
  struct Broadcast final : Pending {
    Impl* m = nullptr;
    std::vector<at::Tensor> tensors;
    c10::intrusive_ptr<c10d::Work> work;
    std::string what;
    void wait() override {
      if (work) m->wait(work, what);
      work.reset();
    }
  };
  auto b = std::make_unique<Broadcast>();
  b->m = &m;
  b->tensors = {std::move(flat)};
  b->what = std::move(what);
  c10d::BroadcastOptions o;
  o.rootRank = root;
  try {
    b->work = m.params_group->broadcast(b->tensors, o);
  } catch (const std::exception& e) {
    BELLOWS_FAIL(ErrorKind::kResource, fmt::format("{}: {} failed to start: {}", m.where(), b->what, first_line(e)),
                 "look for the first rank that reported an error; the last complete checkpoint stays valid");
  }
  return b;
}

void Ddp::barrier() { impl_->wait(impl_->group->barrier(), "barrier"); }

std::vector<bool> Ddp::agree(std::vector<bool> flags) {
  Impl& m = *impl_;
  std::vector<bool> agreed(flags.size(), false);
  if (m.agreement) {  // the previous call's flags, summed over ranks while this step ran
    m.wait(m.agreement, "agreement on stop and checkpoint decisions");
    const at::Tensor summed = m.agreement_flags.to(at::kCPU);  // after the stream-ordered wait: the sums
    const float* v = summed.data_ptr<float>();
    for (std::size_t i = 0; i < agreed.size() && i < static_cast<std::size_t>(m.agreement_flags.numel()); ++i) agreed[i] = v[i] > 0;
  }
  at::Tensor host = at::zeros({static_cast<std::int64_t>(flags.size())}, at::kFloat);
  float* out = host.data_ptr<float>();
  for (std::size_t i = 0; i < flags.size(); ++i) out[i] = flags[i] ? 1.0f : 0.0f;
  m.agreement_flags = host.to(m.control_device());
  std::vector<at::Tensor> one{m.agreement_flags};
  m.agreement = m.group->allreduce(one);
  return agreed;
}

}  // namespace bellows::dist
