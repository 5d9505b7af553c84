// SHA-256 against the FIPS 180-4 / NIST example digests, one-shot and incremental.
#include <gtest/gtest.h>

#include <string>

#include "oscar/file.h"
#include "oscar/sha256.h"
#include "test_support.h"

using oscar::sha256_hex;

TEST(Sha256, KnownDigests) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalEqualsOneShotAtEverySplit) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  const std::string expected = sha256_hex(text);
  for (std::size_t split = 0; split <= text.size(); ++split) {
    oscar::Sha256 h;
    h.update(std::string_view(text).substr(0, split));
    h.update(std::string_view(text).substr(split));
    ASSERT_EQ(h.hex_digest(), expected) << "split at " << split;
  }
}

TEST(Sha256, FileDigestEqualsBytesDigest) {
  oscar::test::TempDir dir;
  const std::string bytes = "hello\nworld\n";
  oscar::write_file_atomic(dir.file("f.txt"), bytes);
  EXPECT_EQ(oscar::sha256_file_hex(dir.file("f.txt")), sha256_hex(bytes));
  oscar::write_file_atomic(dir.file("empty"), "");
  EXPECT_EQ(oscar::sha256_file_hex(dir.file("empty")), sha256_hex(""));
}
