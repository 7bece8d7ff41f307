// Which track each push/pop range is drawn on (recorder/range_tracks.hpp): a thread's ranges
// stay on its own track while they nest; a domain that would partly overlap moves out.
#include <doctest/doctest.h>

#include "range_tracks.hpp"

using namespace ferrum_replay::recorder;

namespace {
constexpr uint32_t kGlobal = 0, kApp = 1, kIo = 2;
}

TEST_CASE("ranges that nest across domains stay on the thread's track") {
  RangeTracks tracks;
  CHECK(tracks.place(kGlobal, 0, 100).track == 0);
  CHECK(tracks.place(kApp, 10, 90).track == 0);
  CHECK(tracks.place(kIo, 20, 30).track == 0);
  CHECK(tracks.place(kIo, 30, 40).track == 0);  // back to back: the first has ended
  CHECK(tracks.place(kApp, 100, 120).track == 0);
  CHECK(tracks.track_count() == 1);
}

TEST_CASE("a domain that would partly overlap moves to a track of its own, for good") {
  RangeTracks tracks;
  CHECK(tracks.place(kGlobal, 0, 60).track == 0);
  const RangeTracks::Placement io = tracks.place(kIo, 50, 80);  // ends after its enclosing range
  CHECK(io.track == 1);
  CHECK(io.is_new);
  CHECK(tracks.domain_of(1) == kIo);
  CHECK(tracks.place(kGlobal, 70, 75).track == 0);  // the global track's stack is empty again
  // Later io ranges follow, even where they would now nest on the thread's track.
  const RangeTracks::Placement later = tracks.place(kIo, 200, 210);
  CHECK(later.track == 1);
  CHECK_FALSE(later.is_new);
  CHECK(tracks.place(kApp, 300, 310).track == 0);
  CHECK(tracks.track_count() == 2);
}

TEST_CASE("each domain that overlaps gets its own track") {
  RangeTracks tracks;
  CHECK(tracks.place(kGlobal, 0, 50).track == 0);
  CHECK(tracks.place(kApp, 40, 70).track == 1);
  CHECK(tracks.place(kIo, 45, 60).track == 2);  // overlaps global [0, 50] too
  CHECK(tracks.place(kGlobal, 55, 65).track == 0);
  CHECK(tracks.place(kIo, 61, 80).track == 2);
  CHECK(tracks.place(kApp, 75, 90).track == 1);
  CHECK(tracks.track_count() == 3);
  CHECK(tracks.domain_of(1) == kApp);
  CHECK(tracks.domain_of(2) == kIo);
}

TEST_CASE("one domain's ranges that do not nest (a launch closed late) spread over its tracks") {
  constexpr uint32_t kShim = 3;
  RangeTracks tracks;
  CHECK(tracks.place(kShim, 0, 100).track == 0);
  CHECK(tracks.place(kShim, 10, 200).track == 1);
  CHECK(tracks.place(kShim, 150, 160).track == 1);
  const RangeTracks::Placement third = tracks.place(kShim, 170, 300);
  CHECK(third.track == 2);
  CHECK(third.is_new);
  // Track 2 is busy until 300, track 1 free after 200: the domain's fitting track is reused.
  const RangeTracks::Placement reused = tracks.place(kShim, 205, 500);
  CHECK(reused.track == 1);
  CHECK_FALSE(reused.is_new);
  CHECK(tracks.track_count() == 3);
}

TEST_CASE("a thread has at most kMaxRangeTracks tracks; past them a range stays where it is") {
  RangeTracks tracks;
  uint32_t opened = 0;
  for (uint64_t i = 0; i < 3 * kMaxRangeTracks; ++i) {
    // Each range ends after every earlier one: it overlaps them all.
    const RangeTracks::Placement p = tracks.place(kIo, i, 1000 + i);
    opened += p.is_new;
    CHECK(p.track < kMaxRangeTracks);
  }
  CHECK(tracks.track_count() == kMaxRangeTracks);
  CHECK(opened == kMaxRangeTracks - 1);
}
