// CSV/TSV tables read into memory as tensors: "x" (float32 features) and "y" (targets), with categorical and
// integer columns, a policy for missing values, and errors that name the file, line and column of bad input.
// The Dataset over such a table is in csv_dataset.h.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace bellows::data {

struct CsvOptions {
  std::filesystem::path path;
  char delimiter = 0;                    // 0: '\t' for .tsv/.tab files, else ','
  std::vector<std::string> features;     // column names for "x", in this order; empty: every column not in targets
  std::vector<std::string> targets;      // column names for "y"; may be empty (then no "y")
  std::vector<std::string> categorical;  // text values map to 0..K-1 in byte-wise sorted order of distinct values
  std::vector<std::string> integer;      // parsed as int64 (error on "1.5")
  // error | drop (drop the row) | zero | mean (mean of the present values of the column; integer columns take it
  // rounded, categorical columns take their most frequent value). Under zero a categorical value becomes index 0.
  std::string missing = "error";
  std::vector<std::string> missing_tokens = {"", "NA", "N/A", "NaN", "nan", "null", "NULL"};
  std::size_t chunk_bytes = 4 << 20;  // bytes per read; lines longer than this are carried over whole
};

struct CsvTable {
  // "x": float32 [N, F]. "y": int64 [N] when there is exactly one target and it is integer or categorical (class
  // labels), else float32 [N, T]; absent without targets.
  std::map<std::string, at::Tensor> tensors;
  std::vector<std::string> feature_names, target_names;
  std::vector<std::int64_t> lines;                             // 1-based file line of each kept row
  std::map<std::string, std::vector<std::string>> categories;  // categorical column -> index-to-value table
  std::int64_t dropped_rows = 0;                               // rows dropped under missing=drop
};

// Reads the whole file. Format: a header line naming the columns, then one row per line ("\n" or "\r\n"); blank
// lines are skipped; a UTF-8 BOM is skipped; unquoted fields are trimmed of spaces and tabs; RFC 4180 quoted
// fields may hold delimiters and "" escapes but not line breaks (a quote left open at the line end is an error).
// Bad input is a kData error naming the file, line and column; inconsistent options are kConfig errors.
CsvTable read_csv(const CsvOptions& options);

}  // namespace bellows::data
