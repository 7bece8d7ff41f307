// Environment settings of the recorder, read once when NVTX first initialises it.
//
//   FERRUM_RECORD_OUT            trace path; %p = pid, %h = host name, %q{VAR} = value of VAR
//                                (empty if unset, named in one warning), %% = %
//                                (docs/text-rules.md). Relative paths are resolved against the
//                                working directory at init: the process's first NVTX call (with
//                                the shim, its first graph launch), not its start. A value
//                                ending in '/' names a directory that gets the default file name.
//                                Default, chosen at init: ferrum-replay.%p.json, or, in one rank of
//                                a multi-process job, with the rank's value at init in it:
//                                ferrum-replay.rankR.%p .json, R from the first of RANK,
//                                OMPI_COMM_WORLD_RANK, SLURM_PROCID that is a decimal number, else
//                                (LOCAL_RANK only) ferrum-replay.%h.localrankR.%p.json. Each
//                                process writes its own file; if the expanded name (a pattern
//                                without %p) was already written by another process since this one
//                                started, ".<pid>" goes before the extension instead of overwriting
//                                that trace (see trace_writer.hpp).
//   FERRUM_RECORD_SESSION        a file whose modification time marks the start of the recording
//                                session (scripts/ferrum-replay record sets it): a trace written
//                                since then by another process is never overwritten, even by a
//                                process that started after it was written.
//   FERRUM_RECORD_TABLE=0        no summary table on stderr (also false/no/off); 1/true/yes/on
//                                or empty: the table (the default). Anything else prints one
//                                line on stderr and keeps the table.
//   FERRUM_RECORD_FORCE=1        also replace a regular file of this user's at the trace path
//                                (also true/yes/on); a symbolic link (never followed) or a
//                                special file is never replaced. By default only an earlier
//                                ferrum-replay trace is replaced; anything else is left alone
//                                and the trace goes to NAME.1.EXT, NAME.2.EXT, ...
//                                (trace_writer.hpp).
//   FERRUM_RECORD_REJECT         fault injection, to test that callers keep push and pop
//                                balanced when a tool refuses a range:
//                                  all  every push returns -1;
//                                  N    (positive integer) every Nth push of the process returns
//                                       -1 (one counter for all threads).
//                                A rejected push is not recorded, but its frame stays on the
//                                (thread, domain) stack so that the matching pop is swallowed
//                                silently; it is counted as "rejectedPushes", never as an error.
//                                Anything else prints one line on stderr and rejects nothing.
//   FERRUM_RECORD_CLOCK          auto (the default): time ranges with the CPU's counter where the
//                                kernel keeps CLOCK_MONOTONIC on it, converted at exit (clock.hpp);
//                                monotonic: read CLOCK_MONOTONIC for every timestamp (slower; for
//                                a machine whose counter is suspected). Anything else prints one
//                                line on stderr and keeps auto.
//   FERRUM_RECORD_MEMORY         bytes of completed ranges the process keeps in memory before
//                                its threads spill them to unnamed temporary files
//                                (spill_file.hpp): a number with an optional K, M or G suffix
//                                (powers of 1024); 0 spills from the first full chunk. Default
//                                24M (about 390,000 ranges: a full chunk counts as the 64-byte
//                                Events the exit report unpacks it into, thread_buffer.cpp
//                                make_room; in memory they are packed, 16 bytes for a range
//                                that repeats its attributes): an ordinary profiling run never
//                                writes to disk, where the kernel's writeback made the first
//                                megabytes of a spill cost 50-100 ns a range on a virtual disk;
//                                a long run stays bounded (24M, plus one chunk per thread).
//                                Anything else prints one line and keeps 24M.
//   FERRUM_RECORD_REJECT_DOMAIN  limit rejection (and the every-Nth counter) to pushes in the
//                                domain of that name; "global" means NVTX's default domain.
//                                Without FERRUM_RECORD_REJECT: one line, nothing rejected.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text_rules.hpp"

namespace ferrum_replay::recorder {

enum class RejectMode { none, all, every_nth };

struct Settings {
  RejectMode reject = RejectMode::none;
  uint64_t reject_every = 0;
  bool reject_domain_only = false;
  std::string reject_domain;  // meaningful when reject_domain_only
  std::string out_pattern = "ferrum-replay.%p.json";
  bool table = true;
  // The rank variable that named the default output (also reported in the trace), if any.
  std::string rank_variable;
  std::string rank_value;
  std::string session_file;  // FERRUM_RECORD_SESSION, empty if unset
  bool force = false;        // FERRUM_RECORD_FORCE: replace an existing file that is not our trace
  // FERRUM_RECORD_CLOCK: read the CPU's counter where it backs CLOCK_MONOTONIC (auto), or
  // always CLOCK_MONOTONIC itself (monotonic).
  bool cpu_counter = true;
  bool spill = true;  // spill full chunks of events to a temporary file (tests switch it off)
  static constexpr uint64_t kDefaultMemory = uint64_t{24} << 20;
  uint64_t memory = kDefaultMemory;  // FERRUM_RECORD_MEMORY: bytes in memory before spilling
};

// Parses settings; appends one complete stderr line (with '\n') per invalid value to `warnings`.
// `env` is common::process_env, or a fake environment in tests.
Settings parse_settings(common::EnvLookup env, void *context, std::vector<std::string> *warnings);

// Every FERRUM_RECORD_* variable the recorder reads, as common/setting_names.hpp lists names:
// kRecordSettingNames, and kInternalRecordSettingNames (set by the wrapper, never suggested).
// The unit tests check parse_settings asks for no other.
inline constexpr char kRecordSettingPrefix[] = "FERRUM_RECORD_";
extern const char kRecordSettingNames[];
extern const char kInternalRecordSettingNames[];

// Adds a warning line for each FERRUM_RECORD_* variable of the start-up environment the
// recorder does not read: a misspelt setting (common::say_unknown_settings).
void say_unknown_settings(std::vector<std::string> *warnings);

// The default output name: ferrum-replay.%p.json, or with the rank of a multi-process job (see
// above); sets settings->rank_variable/rank_value when a rank variable is used.
std::string default_out_name(common::EnvLookup env, void *context, Settings *settings);

// Exposed for tests: a decimal number > 0 that fits in 64 bits, nothing else.
bool parse_positive_u64(std::string_view text, uint64_t *value);
// Exposed for tests: a byte count, decimal, 0 allowed, with an optional K, M or G (or k, m, g)
// suffix meaning 1024, 1024^2, 1024^3; nothing else, and nothing that overflows 64 bits.
bool parse_byte_count(std::string_view text, uint64_t *value);

}  // namespace ferrum_replay::recorder
