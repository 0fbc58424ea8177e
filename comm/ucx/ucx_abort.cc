// The engine's failure handling: abort notices to and from peers, naming
// what an operation still waits for and who is gone, failing a group
// (ucx_engine.h).
#include "comm/ucx/ucx_engine.h"


#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "comm/ucx/ucs_status.h"
#include "comm/ucx/ucx_tags.h"
#include "core/status.h"

namespace gtp::comm::ucx_internal {

// ---- aborts and failures ------------------------------------------------------------------

void Engine::PostAbortRecv() {
  abort_buf_.resize(64 << 10);
  abort_rx_ = Xfer();
  abort_rx_.buf = abort_buf_.data();
  abort_rx_.bytes = abort_buf_.size();
  ucp_request_param_t p{};
  // Completion always through the callback: when an abort was already
  // waiting, an immediate completion leaves recv_info zero (UCX 1.13), and
  // the message would be taken for one from world rank 0 about gid 0.
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                   UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  p.cb.recv = &Engine::OnRecv;
  p.user_data = &abort_rx_;
  p.recv_info.tag_info = &abort_rx_.info;
  ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_.get(), abort_rx_.buf, abort_rx_.bytes,
                                        kKindAbort << 48, kKindMask, &p);
  if (r == nullptr) {
    abort_rx_.done = true;
  } else if (UCS_PTR_IS_ERR(r)) {
    abort_rx_.done = true;
    abort_rx_.status = UCS_PTR_STATUS(r);
  } else {
    abort_rx_.req = r;
  }
}

void Engine::HandleAbort() {
  if (abort_rx_.req != nullptr) ucp_request_free(abort_rx_.req);
  abort_rx_.req = nullptr;
  if (abort_rx_.status == UCS_OK) {
    uint32_t gid = static_cast<uint32_t>(abort_rx_.info.sender_tag >> 50);
    int src_world = static_cast<int>((abort_rx_.info.sender_tag >> 32) & 0xffff);
    const bool notice = (abort_rx_.info.sender_tag & kNoticeBit) != 0;
    std::string payload(abort_buf_.data(), abort_rx_.info.length);
    size_t nl = payload.find('\n');
    int code = static_cast<int>(absl::StatusCode::kUnknown);
    if (nl != std::string::npos) (void)absl::SimpleAtoi(payload.substr(0, nl), &code);
    std::string reason = nl == std::string::npos ? payload : payload.substr(nl + 1);
    if (src_world >= 0 && src_world < static_cast<int>(peers_.size())) {
      peers_[src_world]->last_words = reason;
    }
    if (!notice) {
      std::string name = absl::StrCat("gid ", gid);
      {
        absl::MutexLock l(&mu_);
        auto it = groups_.find(gid);
        if (it != groups_.end()) name = it->second->name;
      }
      FailGroup(gid,
                absl::Status(static_cast<absl::StatusCode>(code),
                             absl::StrCat("group ", name, " (ucx): world rank ", src_world,
                                          " failed: ", reason)),
                /*tell_peers=*/false);
    }
  }
  if (abort_rx_.status != UCS_ERR_CANCELED) PostAbortRecv();
}

void Engine::SendAborts(const Group& g, const absl::Status& st) {
  std::vector<bool> member(peers_.size(), false);
  for (int w : g.world) member[w] = true;
  for (int w = 0; w < static_cast<int>(peers_.size()); ++w) {
    if (w == config_.rank || peers_[w]->error != UCS_OK) continue;
    auto a = std::make_unique<Abort>();
    a->payload = absl::StrCat(static_cast<int>(st.code()), "\n", st.message());
    ucp_request_param_t p{};
    ucs_status_ptr_t req = ucp_tag_send_nbx(
        peers_[w]->ep, a->payload.data(), a->payload.size(),
        Head(g.gid, kKindAbort) | (static_cast<uint64_t>(config_.rank) << 32) |
            (member[w] ? 0 : kNoticeBit),
        &p);
    if (req != nullptr && !UCS_PTR_IS_ERR(req)) {
      a->req = req;
      aborts_out_.push_back(std::move(a));
    }
  }
}

std::string Engine::Outstanding(const Op& op) const {
  std::vector<std::string> who;
  if (op.cur < op.steps.size()) {
    for (const Xfer& x : op.steps[op.cur].xfers) {
      if (!x.done) {
        std::string w =
            absl::StrCat(op.group->Peer(x.peer), x.is_send ? " (not receiving)" : "");
        // A step's pieces all name the same few peers.
        if (std::find(who.begin(), who.end(), w) == who.end()) who.push_back(std::move(w));
      }
    }
  }
  if (who.empty()) return "no transfer outstanding";
  return absl::StrCat("waiting for ", absl::StrJoin(who, ", "));
}

std::string Engine::Gone(const Group& g, int peer) const {
  const Peer& p = *peers_[g.world[peer]];
  if (!p.last_words.empty()) return absl::StrCat(g.Peer(peer), " exited after it failed: ", p.last_words);
  return absl::StrCat(g.Peer(peer), " is gone (", ucs_status_string(p.error), ")");
}

void Engine::FailGroup(uint32_t gid, const absl::Status& st, bool tell_peers) {
  std::shared_ptr<Group> group;
  {
    absl::MutexLock l(&mu_);
    if (failures_.count(gid)) return;
    failures_[gid] = st;
    auto it = groups_.find(gid);
    if (it != groups_.end()) group = it->second;
  }
  any_failure_ = true;
  for (auto& op : active_) {
    if (op->group->gid != gid || op->failed) continue;
    if (!group) group = op->group;
    op->failed = true;
    op->failed_at = absl::Now();
    if (op->cur < op->steps.size()) {
      for (Xfer& x : op->steps[op->cur].xfers) {
        if (!x.done && !x.is_send && x.req != nullptr) ucp_request_cancel(worker_.get(), x.req);
      }
    }
  }
  if (tell_peers && group) SendAborts(*group, st);
}

}  // namespace gtp::comm::ucx_internal
