#include "model/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.hpp"
#include "model/safetensors.hpp"
#include "model/sharded_checkpoint.hpp"

namespace merak::model {
namespace {

namespace fs = std::filesystem;
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kIndexFile = "index.json";
constexpr const char* kLatest = "latest";

constexpr const char* kConfigFile = "config.toml";
// `latest` holds a name of a few dozen bytes; more is not a pointer.
constexpr size_t kmost_latest_bytes = 4096;

bool holds_checkpoint(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p / kModelFile, ec) || fs::is_regular_file(p / kIndexFile, ec);
}

// The type of `p` (following links), not_found when it does not exist.
// Throws merak::error naming `what` and `p` when it cannot be examined (a
// symbolic-link loop, no permission).
fs::file_type path_type(const fs::path& p, const char* what) {
  std::error_code ec;
  const auto st = fs::status(p, ec);
  if (st.type() == fs::file_type::not_found) return st.type();
  if (ec) {
    std::string why = ec.message();
    if (!why.empty()) why[0] = char(std::tolower(static_cast<unsigned char>(why[0])));
    fail("{} '{}': {}", what, p.string(), why);
  }
  return st.type();
}

const char* type_words(fs::file_type t) {
  switch (t) {
    case fs::file_type::directory:
      return "a directory";
    case fs::file_type::fifo:
      return "a FIFO";
    case fs::file_type::character:
      return "a character device";
    case fs::file_type::block:
      return "a block device";
    case fs::file_type::socket:
      return "a socket";
    default:
      return "not a regular file";
  }
}

// Names of the entries of `dir` (none when it cannot be listed).
std::vector<std::string> entry_names(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    out.push_back(it->path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

run_entry run_entry_of(const std::string& name) {
  constexpr size_t kprefix = 5;  // "step_"
  if (name.compare(0, kprefix, "step_") != 0) return run_entry::none;
  size_t digits = 0;
  while (kprefix + digits < name.size() &&
         std::isdigit(static_cast<unsigned char>(name[kprefix + digits])))
    ++digits;
  if (digits < 8) return run_entry::none;
  const std::string rest = name.substr(kprefix + digits);
  if (rest.empty()) return run_entry::checkpoint;
  if (rest == ".old") return run_entry::moved_aside;
  if (rest == ".tmp") return run_entry::assembling;
  return run_entry::none;
}

std::string shown_value(const std::string& text, size_t most) {
  std::string out = text.substr(0, most);
  for (char& c : out)
    if (std::iscntrl(static_cast<unsigned char>(c))) c = '?';
  if (text.size() > most) out += fmt::format("...({} bytes)", text.size());
  return out;
}

std::string read_latest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kLatest).string();
  const auto type = path_type(path, "checkpoint pointer");
  if (type == fs::file_type::not_found) fail("'{}' does not exist", path);
  if (type != fs::file_type::regular)
    fail("'{}' is {}, not a file naming a checkpoint", path, type_words(type));
  // O_NONBLOCK: a FIFO put there after the check above does not block.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail("cannot open '{}': {}", path, std::strerror(errno));
  struct stat st {};
  std::string text(kmost_latest_bytes + 1, '\0');
  ssize_t got = -1;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) got = ::read(fd, text.data(), text.size());
  const int err = errno;
  ::close(fd);
  if (!S_ISREG(st.st_mode)) fail("'{}' is not a regular file", path);
  if (got < 0) fail("cannot read '{}': {}", path, std::strerror(err));
  if (size_t(got) > kmost_latest_bytes)
    fail("'{}' is {} bytes, not a checkpoint name (a line of a few bytes)", path,
         std::max<int64_t>(int64_t(got), int64_t(st.st_size)));
  text.resize(size_t(got));
  std::string name = text.substr(0, text.find('\n'));
  if (!name.empty() && name.back() == '\r') name.pop_back();
  if (name.empty() || name.find('/') != std::string::npos || name.find('\0') != std::string::npos ||
      name == "." || name == "..")
    fail("'{}' does not name a checkpoint (it holds '{}')", path, shown_value(text));
  return name;
}

std::string describe_run(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  std::vector<std::string> checkpoints;
  for (auto& name : entry_names(dir))  // step_*.tmp is no checkpoint: the next save sweeps it
    if (run_entry_of(name) == run_entry::checkpoint || run_entry_of(name) == run_entry::moved_aside)
      checkpoints.push_back(name);
  const bool latest = fs::exists(fs::symlink_status(fs::path(dir) / kLatest, ec));
  if (latest) {
    try {
      const std::string name = read_latest(dir);
      if (run_entry_of(name) == run_entry::checkpoint) {
        const size_t first = name.find_first_not_of('0', 5);
        return fmt::format("latest: step {}",
                           first == std::string::npos ? "0" : name.substr(first));
      }
      return fmt::format("latest: '{}'", shown_value(name));
    } catch (const error&) {
      return "a latest file";
    }
  }
  if (checkpoints.size() == 1) return checkpoints[0] + ", no latest";
  if (!checkpoints.empty())
    return fmt::format("{} checkpoints ({} .. {}), no latest", checkpoints.size(),
                       checkpoints.front(), checkpoints.back());
  return "";
}

bool same_directory(const std::string& a, const std::string& b) {
  auto key = [](const std::string& p, std::error_code& ec) {
    fs::path c = fs::weakly_canonical(p, ec);
    // weakly_canonical keeps a trailing separator: "run/" is "run".
    return c.has_filename() ? c : c.parent_path();
  };
  std::error_code ea, eb;
  const fs::path ka = key(a, ea), kb = key(b, eb);
  return !ea && !eb && ka == kb;
}

bool part_of_run(const std::string& path, const std::string& dir) {
  if (same_directory(path, dir)) return true;
  std::error_code ec;
  fs::path p = fs::weakly_canonical(path, ec);
  if (ec) return false;
  if (!p.has_filename()) p = p.parent_path();
  return same_directory(p.parent_path().string(), dir);
}

bool nothing_to_resume(const std::string& path) {
  const auto type = path_type(path, "--load");
  if (type == fs::file_type::not_found) return true;
  if (type != fs::file_type::directory) return false;  // resolve_checkpoint names it
  if (holds_checkpoint(path)) return false;
  std::error_code ec;
  if (fs::exists(fs::symlink_status(fs::path(path) / kLatest, ec))) return false;
  for (auto& name : entry_names(path))
    if (run_entry_of(name) == run_entry::checkpoint || run_entry_of(name) == run_entry::moved_aside)
      return false;
  return true;
}

void remove_run(const std::string& dir) {
  std::vector<fs::path> doomed = {fs::path(dir) / kLatest, fs::path(dir) / kConfigFile};
  for (auto& name : entry_names(dir))
    if (run_entry_of(name) != run_entry::none) doomed.push_back(fs::path(dir) / name);
  for (auto& p : doomed) {
    std::error_code ec;
    fs::remove_all(p, ec);
    if (ec) fail("cannot remove '{}': {}", p.string(), ec.message());
  }
  fsync_directory(dir);
}

void sweep_assembling(const std::string& dir) {
  for (auto& name : entry_names(dir))
    if (run_entry_of(name) == run_entry::assembling) {
      std::error_code ec;
      fs::remove_all(fs::path(dir) / name, ec);
    }
}

int64_t metadata_count(const metadata_map& meta, const std::string& key, const std::string& dir) {
  auto it = meta.find(key);
  if (it == meta.end()) fail("checkpoint '{}': metadata {} is missing", dir, key);
  const std::string& text = it->second;
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
      v > (uint64_t{1} << 53))
    fail("checkpoint '{}': metadata {} is '{}', not a count from 0 to 2^53", dir, key, text);
  return int64_t(v);
}

std::string checkpoint_name(int64_t step) {
  return fmt::format("step_{:08d}", step);
}

std::string publish_checkpoint(const std::string& dir, const std::string& name) {
  const fs::path final_dir = fs::path(dir) / name;
  const fs::path tmp_dir = fs::path(dir) / (name + ".tmp");
  const fs::path old_dir = fs::path(dir) / (name + ".old");
  std::error_code ec;
  // Without NAME, a NAME.old left by an interrupted save may be what latest
  // reaches: it stays until the new NAME is in place.
  if (fs::exists(final_dir, ec)) {
    fs::remove_all(old_dir, ec);
    fs::rename(final_dir, old_dir, ec);
    if (ec)
      fail("cannot move '{}' aside to '{}': {}", final_dir.string(), old_dir.string(),
           ec.message());
  }
  fs::rename(tmp_dir, final_dir, ec);
  if (ec)
    fail("cannot rename '{}' to '{}': {}", tmp_dir.string(), final_dir.string(), ec.message());
  fsync_directory(dir);
  write_file_atomic((fs::path(dir) / kLatest).string(), name + "\n");
  fs::remove_all(old_dir, ec);
  return final_dir.string();
}

void write_single_device_files(const std::string& dir, const std::vector<std::string>& names,
                               const std::vector<const tensor*>& values,
                               const std::vector<const tensor*>& first_moments,
                               const std::vector<const tensor*>& second_moments,
                               const metadata_map& metadata) {
  std::vector<std::pair<std::string, const tensor*>> model_tensors, opt_tensors;
  for (size_t i = 0; i < names.size(); ++i) {
    model_tensors.emplace_back(names[i], values[i]);
    opt_tensors.emplace_back("m." + names[i], first_moments[i]);
    opt_tensors.emplace_back("v." + names[i], second_moments[i]);
  }
  write_safetensors((fs::path(dir) / kModelFile).string(), model_tensors, metadata);
  write_safetensors((fs::path(dir) / kOptimizerFile).string(), opt_tensors, metadata);
  fsync_directory(dir);
}

std::string save_checkpoint(const std::string& dir, int64_t step, const parameter_store& params,
                            const adamw& opt, const metadata_map& metadata) {
  const std::string tmp_dir = begin_checkpoint(dir, step);
  std::vector<std::string> names;
  std::vector<const tensor*> values, m, v;
  MERAK_CHECK(opt.params().size() == params.all().size(), "optimizer of {} of {} parameters",
              opt.params().size(), params.all().size());
  for (size_t i = 0; i < opt.params().size(); ++i) {
    names.push_back(opt.params()[i]->spec.name);
    values.push_back(&opt.params()[i]->value);
    m.push_back(&opt.first_moments()[i]);
    v.push_back(&opt.second_moments()[i]);
  }
  metadata_map meta = metadata;
  meta["merak.step"] = std::to_string(step);
  meta["merak.adam_t"] = std::to_string(opt.t());
  try {
    write_single_device_files(tmp_dir, names, values, m, v, meta);
    return publish_checkpoint(dir, checkpoint_name(step));
  } catch (...) {
    discard_checkpoint(tmp_dir);
    throw;
  }
}

std::string resolve_checkpoint(const std::string& path) {
  fs::path p(path);
  if (path_type(p, "checkpoint path") == fs::file_type::not_found)
    fail("checkpoint path '{}' does not exist", path);
  if (holds_checkpoint(p)) return p.string();
  if (path_type(p / kLatest, "checkpoint pointer") != fs::file_type::not_found) {
    const std::string name = read_latest(path);
    fs::path c = p / name;
    if (holds_checkpoint(c)) return c.string();
    // A save of the same step interrupted between its two renames.
    if (fs::path old = p / (name + ".old"); holds_checkpoint(old)) return old.string();
    fail("'{}' points at '{}', which holds no checkpoint ({} or {})", (p / kLatest).string(),
         (p / shown_value(name)).string(), kModelFile, kIndexFile);
  }
  fail("'{}' is neither a checkpoint directory (no {} or {}) nor a run directory (no {})", path,
       kModelFile, kIndexFile, kLatest);
}

metadata_map read_checkpoint_metadata(const std::string& path) {
  return checkpoint_reader(path).metadata();
}

metadata_map load_checkpoint(const std::string& path, parameter_store& params, adamw& opt) {
  checkpoint_reader ckpt(path);
  const auto names = ckpt.parameters();
  if (names.size() != params.all().size())
    fail("checkpoint '{}' holds {} tensors but this model has {} parameters (another model shape?)",
         ckpt.dir(), names.size(), params.all().size());
  std::vector<parameter*> all;
  for (auto& p : params.all()) all.push_back(&*p);
  load_parameters(ckpt, all, &opt);
  return ckpt.metadata();
}

}  // namespace merak::model
