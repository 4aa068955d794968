#include "server/kv_event_publisher.h"

#include <chrono>
#include <msgpack.hpp>
#include <zmq.hpp>

#include "core/error.h"

namespace kvlm::server {

namespace {

constexpr int kPollMs = 5;  // how long an event may wait to be batched
constexpr size_t kMaxReplayBytes = size_t{64} << 20;  // the replay buffer's bound in bytes, beside its count

std::string be64(int64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(static_cast<uint64_t>(v) >> (8 * (7 - i)));
  return s;
}

void pack_hash(msgpack::packer<msgpack::sbuffer>& pk, const BlockHash& h, bool as_int) {
  if (as_int) {
    pk.pack_uint64(low64(h));
  } else {
    pk.pack_bin(static_cast<uint32_t>(h.size()));
    pk.pack_bin_body(reinterpret_cast<const char*>(h.data()), static_cast<uint32_t>(h.size()));
  }
}

void pack_str(msgpack::packer<msgpack::sbuffer>& pk, const std::string& s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

// Whether `e` continues the last queued event (a chain of blocks stored, or blocks removed, in
// one medium): vLLM sends a run of blocks as one event.
bool extends(const BlockEvent& last, const BlockEvent& e) {
  if (last.kind != e.kind || last.medium != e.medium) return false;
  if (e.kind == BlockEvent::Kind::Removed) return true;
  return e.kind == BlockEvent::Kind::Stored && e.block_size == last.block_size && e.has_parent &&
         e.parent == last.hashes.back();
}

}  // namespace

struct KvEventPublisher::Sockets {
  zmq::context_t ctx{1};
  zmq::socket_t pub{ctx, zmq::socket_type::pub};
  zmq::socket_t replay{ctx, zmq::socket_type::router};
  bool has_replay = false;
  uint64_t next_seq = 0;
  std::deque<std::pair<uint64_t, std::string>> buffer;  // (seq, payload) for replay
  size_t buffer_bytes = 0;
};

nlohmann::json KvEventStats::to_json() const {
  return {{"batches", batches}, {"events", events}, {"dropped", dropped}, {"replays", replays}};
}

std::string KvEventPublisher::encode_batch(const std::vector<BlockEvent>& events, double ts, int dp_rank, bool as_int) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(3);
  pk.pack_double(ts);
  pk.pack_array(static_cast<uint32_t>(events.size()));
  for (const BlockEvent& e : events) {
    switch (e.kind) {
      case BlockEvent::Kind::Stored:
        pk.pack_array(7);
        pack_str(pk, "BlockStored");
        pk.pack_array(static_cast<uint32_t>(e.hashes.size()));
        for (const BlockHash& h : e.hashes) pack_hash(pk, h, as_int);
        if (e.has_parent)
          pack_hash(pk, e.parent, as_int);
        else
          pk.pack_nil();
        pk.pack_array(static_cast<uint32_t>(e.tokens.size()));
        for (int t : e.tokens) pk.pack_int64(t);
        pk.pack_int64(e.block_size);
        pk.pack_nil();  // lora_id: kvlm serves no adapters
        pack_str(pk, e.medium);
        break;
      case BlockEvent::Kind::Removed:
        pk.pack_array(3);
        pack_str(pk, "BlockRemoved");
        pk.pack_array(static_cast<uint32_t>(e.hashes.size()));
        for (const BlockHash& h : e.hashes) pack_hash(pk, h, as_int);
        pack_str(pk, e.medium);
        break;
      case BlockEvent::Kind::Cleared:
        pk.pack_array(1);
        pack_str(pk, "AllBlocksCleared");
        break;
    }
  }
  pk.pack_int64(dp_rank);
  return std::string(buf.data(), buf.size());
}

KvEventPublisher::KvEventPublisher(KvEventOptions opt) : opt_(std::move(opt)), z_(std::make_unique<Sockets>()) {
  try {
    z_->pub.set(zmq::sockopt::linger, 0);
    z_->pub.bind(opt_.endpoint);
  } catch (const zmq::error_t& e) {
    fail("--kv-events: cannot bind '", opt_.endpoint, "': ", e.what());
  }
  if (!opt_.replay_endpoint.empty()) {
    try {
      z_->replay.set(zmq::sockopt::linger, 0);
      z_->replay.bind(opt_.replay_endpoint);
      z_->has_replay = true;
    } catch (const zmq::error_t& e) {
      fail("--kv-events-replay: cannot bind '", opt_.replay_endpoint, "': ", e.what());
    }
  }
  BlockEvent cleared;
  cleared.kind = BlockEvent::Kind::Cleared;
  emit(std::move(cleared));
  thread_ = std::thread([this] { run(); });
}

KvEventPublisher::~KvEventPublisher() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void KvEventPublisher::emit(BlockEvent e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (queued_events_ >= opt_.max_queued) {
    ++stats_.dropped;
    return;
  }
  ++queued_events_;
  if (!queue_.empty() && extends(queue_.back(), e)) {
    BlockEvent& last = queue_.back();
    last.hashes.insert(last.hashes.end(), e.hashes.begin(), e.hashes.end());
    last.tokens.insert(last.tokens.end(), e.tokens.begin(), e.tokens.end());
    return;
  }
  queue_.push_back(std::move(e));
}

KvEventStats KvEventPublisher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void KvEventPublisher::serve_replays() {
  Sockets& z = *z_;
  for (;;) {  // every request waiting: the client's identity, its envelope (REQ's empty delimiter), the start seq
    std::vector<zmq::message_t> frames;
    zmq::message_t m;
    while (z.replay.recv(m, zmq::recv_flags::dontwait)) {
      frames.push_back(std::move(m));
      if (!z.replay.get(zmq::sockopt::rcvmore)) break;
    }
    if (frames.empty()) return;
    auto reply = [&](const std::string& seq, const std::string& payload) {
      for (size_t i = 0; i + 1 < frames.size(); ++i)  // identity and envelope, echoed
        z.replay.send(zmq::buffer(frames[i].data(), frames[i].size()), zmq::send_flags::sndmore);
      z.replay.send(zmq::buffer(seq), zmq::send_flags::sndmore);
      z.replay.send(zmq::buffer(payload), zmq::send_flags::none);
    };
    // A request whose last frame is not an 8-byte seq gets the end marker alone: a client that
    // sent it waits for no batch that will never come.
    if (frames.size() >= 2 && frames.back().size() == 8) {
      const auto* p = static_cast<const uint8_t*>(frames.back().data());
      uint64_t start = 0;
      for (int i = 0; i < 8; ++i) start = (start << 8) | p[i];
      for (const auto& [seq, payload] : z.buffer)
        if (seq >= start) reply(be64(static_cast<int64_t>(seq)), payload);
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.replays;
    }
    reply(be64(-1), "");
  }
}

void KvEventPublisher::publish_queued() {
  Sockets& z = *z_;
  std::vector<BlockEvent> batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch.swap(queue_);
    queued_events_ = 0;
  }
  if (batch.empty()) return;
  const double ts = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string payload = encode_batch(batch, ts, opt_.dp_rank, opt_.hashes_as_int);
  const uint64_t seq = z.next_seq++;
  const std::string seq_bytes = be64(static_cast<int64_t>(seq));
  z.pub.send(zmq::buffer(opt_.topic), zmq::send_flags::sndmore);
  z.pub.send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore);
  z.pub.send(zmq::buffer(payload), zmq::send_flags::none);
  z.buffer_bytes += payload.size();
  z.buffer.emplace_back(seq, std::move(payload));
  while (z.buffer.size() > opt_.replay_batches || z.buffer_bytes > kMaxReplayBytes) {
    z.buffer_bytes -= z.buffer.front().second.size();
    z.buffer.pop_front();
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.batches;
  stats_.events += static_cast<long>(batch.size());
}

void KvEventPublisher::run() {
  for (bool last_round = false;;) {
    if (z_->has_replay) {
      zmq::pollitem_t item{z_->replay.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(kPollMs));
      if (item.revents & ZMQ_POLLIN) serve_replays();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
    }
    publish_queued();
    if (last_round) return;
    if (stop_) last_round = true;  // one more round: what was queued before the stop goes out
  }
}

}  // namespace kvlm::server
