#ifndef TINYFIRE_CRYPTO_H
#define TINYFIRE_CRYPTO_H
/* Signatures and digests for firmware manifests and images: public-key verification (ECDSA,
 * RSA PKCS#1 v1.5 and PSS) of a SHA-256 digest, and an incremental SHA-256. Every function
 * returns 0 or an mbedTLS error code (text through tinyfire_tls_strerror). */
#include <stddef.h>
#include <stdint.h>

typedef struct tinyfire_public_key tinyfire_public_key;
typedef struct tinyfire_sha256 tinyfire_sha256;

#define TINYFIRE_KEY_EC  1
#define TINYFIRE_KEY_RSA 2

/* A public key from PEM ("BEGIN PUBLIC KEY", "BEGIN RSA PUBLIC KEY") or DER
 * SubjectPublicKeyInfo bytes, or from the certificate those bytes hold. NULL on failure, with
 * `*error` set. */
tinyfire_public_key *tinyfire_public_key_new(const unsigned char *bytes, size_t length, int *error);
void tinyfire_public_key_free(tinyfire_public_key *key);
/* TINYFIRE_KEY_EC or TINYFIRE_KEY_RSA (0 for any other kind). */
int tinyfire_public_key_kind(const tinyfire_public_key *key);
/* The key's size in bits. */
size_t tinyfire_public_key_bits(const tinyfire_public_key *key);

/* For an ECDSA key: 256, 384 or 521 when its curve is NIST P-256, P-384 or P-521; -1 for any
 * other curve (P-192, P-224, secp256k1, Brainpool, …); 0 when the key is not an EC key. */
int tinyfire_public_key_nist_curve(const tinyfire_public_key *key);
/* SHA-256 of the key's SubjectPublicKeyInfo DER (what sha256// pins and fingerprints hash). */
int tinyfire_public_key_spki_sha256(const tinyfire_public_key *key, unsigned char digest[32]);
/* 0 when `signature` is a valid signature by `key` of the SHA-256 digest `hash`, as
 * `openssl dgst -sha256 -sign` makes it: DER ECDSA for an EC key; for an RSA key PKCS#1 v1.5,
 * or PSS with MGF1-SHA-256 and any salt length. */
int tinyfire_public_key_verify_sha256(const tinyfire_public_key *key, const unsigned char hash[32],
                                      const unsigned char *signature, size_t signature_length);

/* Incremental SHA-256. */
tinyfire_sha256 *tinyfire_sha256_new(void);
void tinyfire_sha256_free(tinyfire_sha256 *context);
int tinyfire_sha256_reset(tinyfire_sha256 *context);
int tinyfire_sha256_update(tinyfire_sha256 *context, const unsigned char *bytes, size_t length);
/* Writes the digest of everything since the last reset; the context must be reset before reuse. */
int tinyfire_sha256_finish(tinyfire_sha256 *context, unsigned char digest[32]);
#endif
