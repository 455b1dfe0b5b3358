// The files of a Fashion-MNIST folder (data.dataset fashion-mnist; docs/job_spec.md, "data"):
// the four gzip IDX files of Debian's dataset-fashion-mnist, named in this one place for the
// workers, which read them (worker/data/fashion_mnist.h), and the coordinator, which checks at
// submit that they are there.
#ifndef DAPPLE_COMMON_FASHION_MNIST_FILES_H_
#define DAPPLE_COMMON_FASHION_MNIST_FILES_H_

#include <string>

#include "absl/status/status.h"

namespace dapple {

// "<dir>/<train|t10k>-<images-idx3|labels-idx1>-ubyte.gz" (one '/' between). Pure.
std::string FashionMnistFile(const std::string& dir, bool train, bool images);

// OK when `dir` holds the four files as regular files (or links to them). kInvalidArgument, one
// line, for the first missing one: "data.path /usr/share/datasets is not a Fashion-MNIST folder:
// it has no train-images-idx3-ubyte.gz (data.dataset fashion-mnist reads the four gzip IDX files
// of Debian's dataset-fashion-mnist, installed in /usr/share/datasets/fashion-mnist)"; likewise
// "data.path P does not exist", "is not a folder", "is a link to T, which does not exist", "is a
// link that loops ...", and for a file "its F is a link to T, which does not exist" or "its F is
// not a regular file". Looks at the file system (stat, lstat, readlink) only; the files'
// contents are the workers' to check. Thread-safe.
absl::Status CheckFashionMnistFolder(const std::string& dir);

}  // namespace dapple

#endif  // DAPPLE_COMMON_FASHION_MNIST_FILES_H_
