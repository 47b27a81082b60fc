// gemm/group_list.cc — GroupList: which contiguous rows belong to which expert
// (docs/numerics.md, "Grouped Linear").
//
// The MoE layer hands the grouped GEMMs either per-expert row counts or cumulative end
// offsets (the two forms the field uses). Both are turned into offsets[0..E] here, once, with
// errors that name the offending entry; everything downstream trusts the offsets.
#include "mxtrain/common.h"
#include "mxtrain/gemm.h"

namespace mxtrain {

GroupList GroupList::from_counts(const std::vector<int64_t>& counts, int64_t rows) {
  MXT_CHECK(!counts.empty(), "group list: no experts given (counts is empty)");
  MXT_CHECK(rows >= 0, "group list: negative row count ", rows);
  GroupList g;
  g.offsets.resize(counts.size() + 1);
  g.offsets[0] = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    MXT_CHECK(counts[i] >= 0, "group list: expert ", i, " has a negative token count ",
              counts[i]);
    g.offsets[i + 1] = g.offsets[i] + counts[i];
  }
  MXT_CHECK(g.offsets.back() == rows, "group list: counts sum to ", g.offsets.back(),
            " but the input has ", rows, " rows; the counts must cover every row exactly once");
  return g;
}

// cumsum[g] is the end row (exclusive) of expert g; cumsum.back() must equal rows.
GroupList GroupList::from_cumulative(const std::vector<int64_t>& cumsum, int64_t rows) {
  MXT_CHECK(!cumsum.empty(), "group list: no experts given (cumulative offsets are empty)");
  MXT_CHECK(rows >= 0, "group list: negative row count ", rows);
  GroupList g;
  g.offsets.resize(cumsum.size() + 1);
  g.offsets[0] = 0;
  for (size_t i = 0; i < cumsum.size(); ++i) {
    MXT_CHECK(cumsum[i] >= g.offsets[i], "group list: cumulative offsets must be non-decreasing "
              "and start at >= 0, but entry ", i, " is ", cumsum[i], " after ", g.offsets[i]);
    g.offsets[i + 1] = cumsum[i];
  }
  MXT_CHECK(g.offsets.back() == rows, "group list: last cumulative offset is ", g.offsets.back(),
            " but the input has ", rows, " rows; it must equal the row count");
  return g;
}

}  // namespace mxtrain
