/*
 * hexrpc.h's version macros: HEXRPC_VERSION_CMP / HEXRPC_VERSION_AT_LEAST compare the three
 * parts lexicographically (1.99.0 < 1.100.0 < 2.0.0, where MAJOR*10000 + MINOR*100 + PATCH made
 * 1.100.0 equal to 2.0.0), in #if and in expressions; HEXRPC_VERSION (and HEXRPC_VERSION_PACK)
 * packs MAJOR << 32 | MINOR << 16 | PATCH, which cannot collide while each part fits 16 bits (a
 * static assertion in bindings/c/src/capi/version.rs); the header's numbers are Cargo's version
 * (HEXRPC_EXPECTED_VERSION, a string given with -D: the workspace version, from `pkg-config
 * --modversion hexrpc` or Cargo). It prints HEXRPC_VERSION for its caller to compare.
 *
 * With -DHEXRPC_VERSION_TEST_LIBRARY it is linked with libhexrpc and also checks the library's
 * version functions against the header (hexrpc_version(), hexrpc_version_number(),
 * hexrpc_version_check()).
 *
 * Built and run header-only by bindings/c/tests/version_c.rs (cargo test -p hexrpc-ffi, which
 * compares the printed HEXRPC_VERSION with the library's), and linked by .ci/bindings:
 *   cc  -std=c99 -Wall -Wextra -pedantic -Werror -DHEXRPC_VERSION_TEST_LIBRARY \
 *       -DHEXRPC_EXPECTED_VERSION="\"$(pkg-config --modversion hexrpc)\"" version.c $(pkg-config --cflags --libs hexrpc)
 *   c++ -x c++ -std=c++17 -Wall -Wextra -Wold-style-cast -Werror (the same)
 */
#include <hexrpc.h>
#include <stdio.h>
#include <string.h>

#ifndef HEXRPC_EXPECTED_VERSION
#error "compile with -DHEXRPC_EXPECTED_VERSION='\"MAJOR.MINOR.PATCH\"' (Cargo's version)"
#endif

/* In #if: the preprocessor evaluates the macros (no casts, no function calls). */
#if !HEXRPC_VERSION_AT_LEAST(HEXRPC_VERSION_MAJOR, HEXRPC_VERSION_MINOR, HEXRPC_VERSION_PATCH)
#error "HEXRPC_VERSION_AT_LEAST: not at least its own version"
#endif
#if !HEXRPC_VERSION_AT_LEAST(0, 0, 0)
#error "HEXRPC_VERSION_AT_LEAST: not at least 0.0.0"
#endif
#if HEXRPC_VERSION_AT_LEAST(HEXRPC_VERSION_MAJOR + 1, 0, 0)
#error "HEXRPC_VERSION_AT_LEAST: at least the next major"
#endif
#if HEXRPC_VERSION_CMP(1, 99, 0, 1, 100, 0) >= 0 || HEXRPC_VERSION_CMP(1, 100, 0, 2, 0, 0) >= 0
#error "HEXRPC_VERSION_CMP: 1.99.0 < 1.100.0 < 2.0.0 in #if"
#endif
#if HEXRPC_VERSION_PACK(1, 100, 0) == HEXRPC_VERSION_PACK(2, 0, 0)
#error "HEXRPC_VERSION_PACK: 1.100.0 and 2.0.0 collide in #if"
#endif
#if HEXRPC_VERSION != HEXRPC_VERSION_PACK(HEXRPC_VERSION_MAJOR, HEXRPC_VERSION_MINOR, HEXRPC_VERSION_PATCH)
#error "HEXRPC_VERSION is not the packed parts"
#endif

static int bad = 0;

static void check(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "version check failed: %s\n", what);
    bad++;
  }
}

/* a < b and the other comparisons that follow from it, with the CMP helper and the packing. */
#define LESS(a1, a2, a3, b1, b2, b3)                                                                        \
  do {                                                                                                      \
    check(HEXRPC_VERSION_CMP(a1, a2, a3, b1, b2, b3) < 0, #a1 "." #a2 "." #a3 " < " #b1 "." #b2 "." #b3);   \
    check(HEXRPC_VERSION_CMP(b1, b2, b3, a1, a2, a3) > 0, #b1 "." #b2 "." #b3 " > " #a1 "." #a2 "." #a3);   \
    check(HEXRPC_VERSION_CMP(a1, a2, a3, a1, a2, a3) == 0, #a1 "." #a2 "." #a3 " == itself");               \
    check(HEXRPC_VERSION_PACK(a1, a2, a3) < HEXRPC_VERSION_PACK(b1, b2, b3),                                \
          "PACK(" #a1 "." #a2 "." #a3 ") < PACK(" #b1 "." #b2 "." #b3 ")");                                 \
  } while (0)

int main(void) {
  unsigned major = 0, minor = 0, patch = 0;
  char expected[64];
#ifdef HEXRPC_VERSION_TEST_LIBRARY
  const char *lib;
#endif

  /* Boundaries where MAJOR*10000 + MINOR*100 + PATCH was ambiguous or wrong. */
  LESS(1, 99, 0, 1, 100, 0);
  LESS(1, 100, 0, 2, 0, 0);   /* the old encoding: both 20000 */
  LESS(1, 0, 100, 1, 1, 0);   /* the old encoding: both 10100 */
  LESS(1, 0, 99, 1, 0, 100);
  LESS(0, 99, 99, 0, 100, 0);
  LESS(0, 0, 65535, 0, 1, 0);
  LESS(0, 65535, 65535, 1, 0, 0);
  LESS(65534, 65535, 65535, 65535, 0, 0);
  check(HEXRPC_VERSION_PACK(65535, 65535, 65535) == 0xffffffffffffull, "PACK(65535.65535.65535) is 0xffff_ffff_ffff");
  check(HEXRPC_VERSION_PACK(1, 2, 3) == 0x0000000100020003ull, "PACK(1.2.3) is 1 << 32 | 2 << 16 | 3");

  /* AT_LEAST against this header's version, from each side of each part. */
  check(HEXRPC_VERSION_AT_LEAST(HEXRPC_VERSION_MAJOR, HEXRPC_VERSION_MINOR, HEXRPC_VERSION_PATCH), "at least itself");
  check(!HEXRPC_VERSION_AT_LEAST(HEXRPC_VERSION_MAJOR, HEXRPC_VERSION_MINOR, HEXRPC_VERSION_PATCH + 1), "not at least the next patch");
  check(!HEXRPC_VERSION_AT_LEAST(HEXRPC_VERSION_MAJOR, HEXRPC_VERSION_MINOR + 1, 0), "not at least the next minor");
  check(!HEXRPC_VERSION_AT_LEAST(HEXRPC_VERSION_MAJOR + 1, 0, 0), "not at least the next major");
  check(HEXRPC_VERSION_AT_LEAST(HEXRPC_VERSION_MAJOR, 0, 0), "at least MAJOR.0.0");
  check(HEXRPC_VERSION_AT_LEAST(0, 65535, 65535) == (HEXRPC_VERSION_MAJOR > 0), "a lower major with the largest parts");

  /* The header is Cargo's version. */
  if (sscanf(HEXRPC_EXPECTED_VERSION, "%u.%u.%u", &major, &minor, &patch) != 3) {
    fprintf(stderr, "HEXRPC_EXPECTED_VERSION %s is not MAJOR.MINOR.PATCH\n", HEXRPC_EXPECTED_VERSION);
    return 2;
  }
  check(major == HEXRPC_VERSION_MAJOR && minor == HEXRPC_VERSION_MINOR && patch == HEXRPC_VERSION_PATCH,
        "HEXRPC_VERSION_MAJOR.MINOR.PATCH is Cargo's version");
  snprintf(expected, sizeof expected, "%d.%d.%d", HEXRPC_VERSION_MAJOR, HEXRPC_VERSION_MINOR, HEXRPC_VERSION_PATCH);

  printf("HEXRPC_VERSION=%llu (%s)\n", HEXRPC_VERSION, expected);

#ifdef HEXRPC_VERSION_TEST_LIBRARY
  /* And the library's: the string, the packed number, the check. */
  lib = hexrpc_version();
  check(strcmp(lib, HEXRPC_EXPECTED_VERSION) == 0 && strcmp(lib, expected) == 0, "hexrpc_version() is the header's");
  check(hexrpc_version_number() == HEXRPC_VERSION, "hexrpc_version_number() is HEXRPC_VERSION");
  check(HEXRPC_VERSION_CHECK() == HEXRPC_OK, "HEXRPC_VERSION_CHECK() passes");
  check(hexrpc_version_check(HEXRPC_VERSION_PACK(HEXRPC_VERSION_MAJOR, HEXRPC_VERSION_MINOR, HEXRPC_VERSION_PATCH + 1)) == HEXRPC_OK,
        "a newer patch's header is served");
  check(hexrpc_version_check(HEXRPC_VERSION_PACK(HEXRPC_VERSION_MAJOR + 1, HEXRPC_VERSION_MINOR, HEXRPC_VERSION_PATCH)) ==
            HEXRPC_ERR_UNAVAILABLE,
        "another major's header is refused");
  check(hexrpc_version_check(HEXRPC_VERSION_PACK(HEXRPC_VERSION_MAJOR, HEXRPC_VERSION_MINOR + 1, 0)) == HEXRPC_ERR_UNAVAILABLE,
        "a newer minor's header is refused");
  check(strstr(hexrpc_last_error_message(), expected) != NULL, "the refusal names the library's version");
  /* A header minor of 100 is 0.100.0 or 1.100.0, never the old encoding's 1.0.0 / 2.0.0. */
  check(hexrpc_version_check(HEXRPC_VERSION_PACK(HEXRPC_VERSION_MAJOR, 100, 0)) == HEXRPC_ERR_UNAVAILABLE, "minor 100 is refused");
  check(strstr(hexrpc_last_error_message(), ".100.0") != NULL, "the refusal decodes minor 100");
#endif

#ifdef HEXRPC_VERSION_TEST_LIBRARY
  if (bad == 0) printf("hexrpc.h %s: version macros and library version checks passed\n", expected);
#else
  if (bad == 0) printf("hexrpc.h %s: version macro checks passed\n", expected);
#endif
  return bad;
}
