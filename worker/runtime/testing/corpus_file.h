// A small text corpus in a fresh temporary file, for tests of byte-level language models
// (worker/data/text_dataset.h): about 2.3 KB of verse with some structure to learn. The file
// and its folder are removed when the object is destroyed. For tests only.
#ifndef DAPPLE_WORKER_RUNTIME_TESTING_CORPUS_FILE_H_
#define DAPPLE_WORKER_RUNTIME_TESTING_CORPUS_FILE_H_

#include <string>

namespace dapple::worker::parity {

class CorpusFile {
 public:
  CorpusFile();
  ~CorpusFile();
  CorpusFile(const CorpusFile&) = delete;
  CorpusFile& operator=(const CorpusFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string dir_, path_;
};

}  // namespace dapple::worker::parity

#endif  // DAPPLE_WORKER_RUNTIME_TESTING_CORPUS_FILE_H_
