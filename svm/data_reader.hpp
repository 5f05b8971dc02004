#pragma once
// Readers of labelled data files. Both are strict: any malformed line is a
// merak::error naming the file, the 1-based line number and what is wrong.
// Blank lines are skipped. Labels must be +1 / 1 or -1 / 0 (0 reads as -1).
//
// LIBSVM text: `label index:value index:value ...`, indices 1-based and
//   strictly ascending; read into a sparse (CSR) matrix.
// CSV: `label,x1,x2,...`, the same number of fields on every line, read
//   into a dense matrix. A first line whose first field is not a number is
//   a header (column names) and is skipped.
// Errors quote at most 40 characters of a field.

#include <string>
#include <string_view>

#include "svm/dataset.hpp"

namespace merak::svm {

enum class data_format { libsvm, csv };
// "libsvm" or "csv"; "auto" guesses from the file name (.csv is CSV).
data_format parse_data_format(std::string_view name, const std::string& path);

// min_features: the matrix has at least this many columns (a model's p).
dataset read_libsvm(const std::string& path, int64_t min_features = 0);
dataset read_csv(const std::string& path, int64_t min_features = 0);
dataset read_data(const std::string& path, data_format f, int64_t min_features = 0);

// The same parsers on text already in memory; `name` stands for the file.
dataset parse_libsvm(std::string_view text, const std::string& name, int64_t min_features = 0);
dataset parse_csv(std::string_view text, const std::string& name, int64_t min_features = 0);

}  // namespace merak::svm
