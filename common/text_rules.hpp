// The text rules of docs/text-rules.md, implemented once for every C++ part: output patterns
// (%p, %h, %q{VAR}, %%), fresh names (NAME.TOKEN.EXT) and printable quoting. Linked by both the
// shim, which cannot use libstdc++, and the recorder: plain functions writing into the caller's
// buffers; no allocation, no exceptions, no std::string. The table of cases every
// implementation is tested against is tests/cases/text_rules.json (tests/common/
// text_rules_probe.cpp runs it against this file).
#pragma once

#include <stddef.h>

namespace ferrum_replay::common {

// The longest expansion of an output pattern (bytes, without the terminating NUL).
inline constexpr size_t kMaxExpandedPath = 4095;
// The byte limit of a user value quoted in a message.
inline constexpr size_t kMessageLimit = 200;
// A buffer that holds any quoted message value: the limit, "..." and the NUL.
inline constexpr size_t kQuotedSize = kMessageLimit + 4;

// A getenv stand-in: tests and probes give a fake environment.
using EnvLookup = const char *(*)(const char *name, void *context);
// The EnvLookup of the process environment: the one it was started with (startup_env.hpp, the
// rule for every setting of ours; `context` unused).
const char *process_env(const char *name, void *context);

// Expands `pattern` into `out` (terminated). %p -> `pid`, %h -> `host` (null: empty),
// %q{NAME} -> the value of NAME ([A-Za-z_][A-Za-z0-9_]*), %% -> %; anything else after '%' is
// kept literally. A '/' that would begin the expansion of a pattern that does not begin with it
// (its leading placeholders expanded to nothing) gets a '.' before it: a relative pattern stays
// relative. Each NAME that is unset is written once into `unset` (", " between names;
// "" when none; cut at a name boundary if it does not fit; `unset` may be null). Returns false
// when the expansion is longer than kMaxExpandedPath or than `out_size` - 1 allows (out is then
// empty).
bool expand_pattern(const char *pattern, long pid, const char *host, EnvLookup env, void *context,
                    char *out, size_t out_size, char *unset, size_t unset_size);

// Calls `visit(name, length, context)` for each variable expanding `pattern` by the rule above
// reads — each %q{NAME} it expands, not one that %% makes literal (%%q{NAME}) — in order; `name`
// points into the pattern (not terminated).
void each_pattern_variable(const char *pattern,
                           void (*visit)(const char *name, size_t length, void *context),
                           void *context);

// This host's name for %h ("" if it cannot be read); `out_size` >= 1.
void host_name(char *out, size_t out_size);

// Where fresh_name puts ".TOKEN" in `path`: the offset of the extension's '.', or the length.
size_t fresh_name_split(const char *path);
// NAME.TOKEN.EXT (NAME.TOKEN when the last component has no extension: no '.', or only one at
// its first or last character). False if it does not fit into `out`.
bool fresh_name(const char *path, const char *token, char *out, size_t out_size);
// The same with a decimal number as the token.
bool fresh_name(const char *path, unsigned long token, char *out, size_t out_size);

// `in` (in_length bytes, NULs included) as printable UTF-8 in `out`, terminated: well-formed
// UTF-8 kept; C0, DEL, C1, U+2028..U+202E, U+2066..U+2069 and each byte of a malformed
// sequence become '?'.
// Stops before a character that would not fit into out_size - 1 bytes (never splits one);
// *cut (if not null) says whether anything was left out. Returns the length written.
size_t printable_copy(const char *in, size_t in_length, char *out, size_t out_size,
                      bool *cut = nullptr);
// The same of a C string (a NUL ends it; null is ""): the form names take in fixed buffers.
size_t printable_copy(const char *in, char *out, size_t out_size);

// Section 4: the NVTX domain the user names (FERRUM_REPLAY_DOMAIN), shared by the shim (which
// pushes its ranges there), the recorder (which files GPU time there) and the judges. A name
// is 1 to kMaxDomainLength bytes, all kept by printable_copy, not "MPI" (Nsight Systems
// hides that domain), not kGlobalDomainName (a trace's and a table's name for NVTX's
// default domain, where the program's own ranges go: the judges would count those as
// replays) and not kMoreDomainsName (the recorder's for the program's domains beyond its
// 4,096th, for the same reason). Returns the name to use: `value`, or kDefaultDomainName when it is
// null or empty (unset) or no such name; then *problem (if not null) says what it must be, or null.
inline constexpr size_t kMaxDomainLength = 63;
inline constexpr char kDefaultDomainName[] = "ferrum-replay";
inline constexpr char kGlobalDomainName[] = "global";
inline constexpr char kMoreDomainsName[] = "(more domains)";
const char *domain_name(const char *value, const char **problem = nullptr);

// The printable form limited to `limit` bytes, "..." appended when anything was cut: the form a
// value takes in a message (without the single quotes around it). `out_size` must be at least
// limit + 4 (a smaller buffer lowers the limit). Returns the length.
size_t printable_quote(const char *in, size_t in_length, size_t limit, char *out, size_t out_size);
// Of a NUL-terminated string (null is ""), with kMessageLimit.
size_t printable_quote(const char *in, char *out, size_t out_size);

}  // namespace ferrum_replay::common
