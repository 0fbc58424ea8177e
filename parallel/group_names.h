// parallel/group_names.h — the names of the standard process groups
// (StandardGroupSpecs in process_groups.h says what each holds), so code asks
// for groups::kTp rather than spelling "tp": a typo is a compile error, not a
// NotFound at run time.
#pragma once

namespace gtp::parallel::groups {

inline constexpr char kGrid[] = "grid";          // every rank of the grid
inline constexpr char kTp[] = "tp";              // tensor parallel
inline constexpr char kGtp[] = "gtp";            // weight-shard gather / reduce-scatter peers
inline constexpr char kTpGtp[] = "tp_gtp";       // all shards of one weight
inline constexpr char kCp[] = "cp";              // context parallel
inline constexpr char kTpCp[] = "tp_cp";         // ranks of one data lane in one stage
inline constexpr char kDp[] = "dp";              // data-parallel replicas
inline constexpr char kDpCp[] = "dp_cp";         // gradient reduction and optimizer sharding
inline constexpr char kReplicate[] = "replicate";  // alias of dp_cp
inline constexpr char kData[] = "data";          // data lanes (gtp × dp)
inline constexpr char kDataCp[] = "data_cp";     // ranks seeing different tokens of one part
inline constexpr char kPp[] = "pp";              // pipeline
inline constexpr char kMp[] = "mp";              // one model replica
inline constexpr char kEmbd[] = "embd";          // first and last stage (tied embeddings)
inline constexpr char kEp[] = "ep";              // expert parallel
inline constexpr char kEtp[] = "etp";            // expert tensor parallel
inline constexpr char kEgtp[] = "egtp";          // expert weight-shard peers
inline constexpr char kEtpEgtp[] = "etp_egtp";   // all shards of one expert weight
inline constexpr char kEtpEp[] = "etp_ep";       // token dispatch
inline constexpr char kEdp[] = "edp";            // expert data parallel
inline constexpr char kEmp[] = "emp";            // ranks holding distinct expert weights

}  // namespace gtp::parallel::groups
