// The BPE model: vocabulary, ranked merges applied as tokenizers' Word::merge_all, byte fallback.
#include <array>
#include <mutex>
#include <queue>
#include <shared_mutex>
#include <unordered_map>

#include "internal.h"

namespace oscar::tok {

namespace {

constexpr std::size_t kCacheCapacity = 1 << 17;  // words; results never depend on the cache
constexpr std::size_t kCacheMaxWordBytes = 256;  // as `tokenizers`: longer words are not cached

struct MergeInfo {
  std::uint32_t rank;
  std::int32_t new_id;
};

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
         static_cast<std::uint32_t>(b);
}

struct Symbol {
  std::int32_t id;
  std::int64_t prev;
  std::int64_t next;
  std::size_t len;  // bytes; 0 marks a symbol merged into its left neighbour
};

struct QueueEntry {
  std::uint32_t rank;
  std::size_t pos;
  std::int32_t new_id;
};

// Min-heap on (rank, pos), the order of `tokenizers`' Merge.
struct QueueOrder {
  bool operator()(const QueueEntry& a, const QueueEntry& b) const {
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.pos > b.pos;
  }
};

}  // namespace

struct BpeModel::Impl {
  std::string origin;
  std::unordered_map<std::string, std::int32_t> vocab;
  std::unordered_map<std::int32_t, std::string> vocab_r;
  std::unordered_map<std::uint64_t, MergeInfo> merges;
  std::optional<std::string> unk_token;
  std::string prefix;  // continuing_subword_prefix
  std::string suffix;  // end_of_word_suffix
  bool has_prefix = false, has_suffix = false;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  std::array<std::int32_t, 256> byte_ids{};

  mutable std::shared_mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>> cache;

  std::optional<std::int32_t> find(const std::string& s) const {
    auto it = vocab.find(s);
    if (it == vocab.end()) return std::nullopt;
    return it->second;
  }

  std::int32_t unk_id() const {
    auto id = find(*unk_token);
    OSCAR_CHECK(id.has_value(), "tokenizer.json '{}': unk_token '{}' is not in the vocabulary",
                origin, *unk_token);
    return *id;
  }

  void merge_word(std::string_view w, std::vector<std::int32_t>& out) const;
};

BpeModel::BpeModel(const Json& j, const std::string& origin) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.origin = origin;
  const std::string where = "model 'BPE'";
  auto dropout = j.find("dropout");
  if (dropout != j.end() && !dropout->is_null()) {
    if (!dropout->is_number() || dropout->get<double>() != 0.0) {
      config_fail(origin, fmt::format("{}: dropout {} is not supported (only null or 0)", where,
                                      dropout->dump()));
    }
  }
  auto unk = j.find("unk_token");
  if (unk != j.end() && !unk->is_null()) m.unk_token = get_string(j, "unk_token", origin, where);
  auto pre = j.find("continuing_subword_prefix");
  if (pre != j.end() && !pre->is_null()) {
    m.prefix = get_string(j, "continuing_subword_prefix", origin, where);
    m.has_prefix = true;
  }
  auto suf = j.find("end_of_word_suffix");
  if (suf != j.end() && !suf->is_null()) {
    m.suffix = get_string(j, "end_of_word_suffix", origin, where);
    m.has_suffix = true;
  }
  m.fuse_unk = get_bool_or(j, "fuse_unk", false, origin, where);
  m.byte_fallback = get_bool_or(j, "byte_fallback", false, origin, where);
  m.ignore_merges = get_bool_or(j, "ignore_merges", false, origin, where);

  const Json& vocab = require_field(j, "vocab", origin, where);
  if (!vocab.is_object()) config_fail(origin, "model 'BPE': 'vocab' must be an object");
  m.vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const Json& v = it.value();
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > INT32_MAX) {
      config_fail(origin, fmt::format("model 'BPE': vocab entry \"{}\" has invalid id {}", it.key(),
                                      v.dump()));
    }
    auto id = static_cast<std::int32_t>(v.get<std::int64_t>());
    m.vocab[it.key()] = id;
    m.vocab_r[id] = it.key();
  }
  for (int b = 0; b < 256; ++b) {
    auto id = m.find(fmt::format("<0x{:02X}>", b));
    m.byte_ids[b] = id ? *id : -1;
  }

  const Json& merges = require_field(j, "merges", origin, where);
  if (!merges.is_array()) config_fail(origin, "model 'BPE': 'merges' must be a list");
  m.merges.reserve(merges.size() * 2);
  std::uint32_t rank = 0;
  for (const Json& item : merges) {
    std::string a, b;
    if (item.is_string()) {
      const std::string& line = item.get_ref<const std::string&>();
      if (line.rfind("#version", 0) == 0) continue;  // header line of merges.txt files
      std::size_t sp = line.find(' ');
      if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos) {
        config_fail(origin, fmt::format("model 'BPE': merge {} (\"{}\") is not of the form \"a b\"",
                                        rank + 1, line));
      }
      a = line.substr(0, sp);
      b = line.substr(sp + 1);
    } else if (item.is_array() && item.size() == 2 && item[0].is_string() && item[1].is_string()) {
      a = item[0].get<std::string>();
      b = item[1].get<std::string>();
    } else {
      config_fail(origin, fmt::format("model 'BPE': merge {} must be \"a b\" or [\"a\", \"b\"], "
                                      "got {}",
                                      rank + 1, item.dump()));
    }
    auto a_id = m.find(a);
    auto b_id = m.find(b);
    if (!a_id || !b_id) {
      config_fail(origin,
                  fmt::format("model 'BPE': merge {} uses \"{}\", which is not in the vocab",
                              rank + 1, !a_id ? a : b));
    }
    if (b.size() < m.prefix.size() || b.compare(0, m.prefix.size(), m.prefix) != 0) {
      config_fail(origin, fmt::format("model 'BPE': merge {}: \"{}\" lacks the continuing-subword "
                                      "prefix \"{}\"",
                                      rank + 1, b, m.prefix));
    }
    std::string merged = a + b.substr(m.prefix.size());
    auto new_id = m.find(merged);
    if (!new_id) {
      config_fail(origin, fmt::format("model 'BPE': merge {} produces \"{}\", which is not in the "
                                      "vocab",
                                      rank + 1, merged));
    }
    // A repeated pair keeps its last rank, as `tokenizers` (which collects into a map) does.
    m.merges[pair_key(*a_id, *b_id)] = MergeInfo{rank, *new_id};
    ++rank;
  }
}

BpeModel::~BpeModel() = default;

void BpeModel::Impl::merge_word(std::string_view w, std::vector<std::int32_t>& out) const {
  std::vector<Symbol> symbols;
  symbols.reserve(w.size());
  auto add = [&](std::int32_t id, std::size_t len) {
    std::int64_t n = static_cast<std::int64_t>(symbols.size());
    if (!symbols.empty()) symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, len});
  };
  bool have_unk = false;
  std::int32_t pending_unk = 0;
  std::size_t pending_unk_len = 0;
  std::string key;
  std::size_t i = 0;
  while (i < w.size()) {
    std::size_t start = i;
    next_char(w, i);
    std::size_t byte_len = i - start;
    key.clear();
    if (start > 0 && has_prefix) key += prefix;
    key.append(w.substr(start, byte_len));
    if (i == w.size() && has_suffix) key += suffix;

    auto it = vocab.find(key);
    if (it != vocab.end()) {
      if (have_unk) {
        add(pending_unk, pending_unk_len);
        have_unk = false;
      }
      add(it->second, byte_len);
      continue;
    }
    if (byte_fallback) {
      bool all = true;
      for (char c : key) all = all && byte_ids[static_cast<std::uint8_t>(c)] >= 0;
      if (all) {
        // `tokenizers` emits these without flushing a pending unk first; keep that order.
        for (char c : key) add(byte_ids[static_cast<std::uint8_t>(c)], 1);
        continue;
      }
    }
    if (unk_token) {
      if (have_unk && fuse_unk) {
        pending_unk_len += byte_len;
      } else {
        if (have_unk) add(pending_unk, pending_unk_len);
        pending_unk = unk_id();
        pending_unk_len = byte_len;
        have_unk = true;
      }
    }
  }
  if (have_unk) add(pending_unk, pending_unk_len);

  // Word::merge_all: repeatedly apply the lowest-ranked merge, leftmost first.
  std::priority_queue<QueueEntry, std::vector<QueueEntry>, QueueOrder> queue;
  for (std::size_t k = 0; k + 1 < symbols.size(); ++k) {
    auto m = merges.find(pair_key(symbols[k].id, symbols[k + 1].id));
    if (m != merges.end()) queue.push({m->second.rank, k, m->second.new_id});
  }
  while (!queue.empty()) {
    QueueEntry top = queue.top();
    queue.pop();
    Symbol& cur = symbols[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    auto next_pos = static_cast<std::size_t>(cur.next);
    Symbol right = symbols[next_pos];
    // Skip entries made stale by earlier merges.
    auto m = merges.find(pair_key(cur.id, right.id));
    if (m == merges.end() || m->second.new_id != top.new_id) continue;

    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    symbols[next_pos].len = 0;
    if (right.next > -1 && static_cast<std::size_t>(right.next) < symbols.size()) {
      symbols[static_cast<std::size_t>(right.next)].prev = static_cast<std::int64_t>(top.pos);
    }
    const Symbol& now = symbols[top.pos];
    if (now.prev >= 0) {
      const Symbol& left = symbols[static_cast<std::size_t>(now.prev)];
      auto lm = merges.find(pair_key(left.id, now.id));
      if (lm != merges.end()) {
        queue.push({lm->second.rank, static_cast<std::size_t>(now.prev), lm->second.new_id});
      }
    }
    if (now.next >= 0 && static_cast<std::size_t>(now.next) < symbols.size()) {
      const Symbol& nxt = symbols[static_cast<std::size_t>(now.next)];
      auto rm = merges.find(pair_key(now.id, nxt.id));
      if (rm != merges.end()) queue.push({rm->second.rank, top.pos, rm->second.new_id});
    }
  }
  for (const Symbol& s : symbols) {
    if (s.len != 0) out.push_back(s.id);
  }
}

void BpeModel::tokenize(std::string_view word, std::vector<std::int32_t>& ids) const {
  if (word.empty()) return;
  const Impl& m = *impl_;
  if (m.ignore_merges) {
    auto it = m.vocab.find(std::string(word));
    if (it != m.vocab.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  bool cacheable = word.size() < kCacheMaxWordBytes;
  std::string key;
  if (cacheable) {
    key.assign(word);
    std::shared_lock<std::shared_mutex> lock(m.cache_mutex);
    auto it = m.cache.find(key);
    if (it != m.cache.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::size_t before = ids.size();
  m.merge_word(word, ids);
  if (cacheable) {
    std::unique_lock<std::shared_mutex> lock(m.cache_mutex);
    if (m.cache.size() < kCacheCapacity) {
      m.cache.emplace(std::move(key), std::vector<std::int32_t>(ids.begin() + before, ids.end()));
    }
  }
}

std::size_t BpeModel::vocab_size() const { return impl_->vocab.size(); }

const std::string* BpeModel::id_to_token(std::int32_t id) const {
  auto it = impl_->vocab_r.find(id);
  return it == impl_->vocab_r.end() ? nullptr : &it->second;
}

std::optional<std::int32_t> BpeModel::token_to_id(std::string_view token) const {
  return impl_->find(std::string(token));
}

}  // namespace oscar::tok
