#include "worker/runtime/testing/corpus_file.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

namespace dapple::worker::parity {
namespace {

std::string Corpus() {
  const char* lines[] = {
      "In the beginning God created the heaven and the earth.\n",
      "And the earth was without form, and void; and darkness was upon the face of the deep.\n",
      "And God said, Let there be light: and there was light.\n",
      "And God saw the light, that it was good: and God divided the light from the darkness.\n",
  };
  std::string text;
  for (int i = 0; i < 8; ++i) {
    for (const char* line : lines) text += line;
  }
  return text;
}

}  // namespace

CorpusFile::CorpusFile() {
  std::string pattern = (std::filesystem::temp_directory_path() / "corpus_file.XXXXXX").string();
  dir_ = mkdtemp(pattern.data());
  path_ = dir_ + "/corpus.txt";
  std::ofstream(path_, std::ios::binary) << Corpus();
}

CorpusFile::~CorpusFile() { std::filesystem::remove_all(dir_); }

}  // namespace dapple::worker::parity
