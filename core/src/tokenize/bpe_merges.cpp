#include "bpe_merges.h"

#include <queue>

namespace attnscope {

void BpeMerges::add(int32_t left, int32_t right, int32_t result) {
  table_.emplace(key(left, right), Merge{next_rank_++, result});
}

const BpeMerges::Merge* BpeMerges::find(int32_t left, int32_t right) const {
  auto it = table_.find(key(left, right));
  return it == table_.end() ? nullptr : &it->second;
}

void BpeMerges::apply(std::vector<int32_t>& symbols) const {
  const int n = static_cast<int>(symbols.size());
  if (n < 2) return;

  // A doubly linked list over the symbols; a merged-away symbol is marked dead.
  struct Node {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Node> nodes(n);
  for (int i = 0; i < n; ++i) nodes[i] = {symbols[i], i - 1, i + 1 < n ? i + 1 : -1, true};

  // A candidate merge of the pair starting at node `left`. It is stale when either side has
  // changed since it was queued, which the recorded ids detect (ids only change by merging).
  struct Candidate {
    int32_t rank;
    int left;
    int right;
    int32_t left_id, right_id, result;
  };
  auto worse = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> queue(worse);
  auto push = [&](int left) {
    const int right = nodes[left].next;
    if (right < 0) return;
    if (const Merge* m = find(nodes[left].id, nodes[right].id))
      queue.push({m->rank, left, right, nodes[left].id, nodes[right].id, m->result});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Node& l = nodes[c.left];
    if (!l.alive || l.next != c.right || l.id != c.left_id || nodes[c.right].id != c.right_id)
      continue;
    Node& r = nodes[c.right];
    l.id = c.result;
    l.next = r.next;
    if (r.next >= 0) nodes[r.next].prev = c.left;
    r.alive = false;
    if (l.prev >= 0) push(l.prev);
    push(c.left);
  }

  symbols.clear();
  for (int i = 0; i >= 0; i = nodes[i].next) symbols.push_back(nodes[i].id);
}

}  // namespace attnscope
