#include "tinyfire_crypto.h"

#include <stdlib.h>
#include <string.h>

#include <mbedtls/ecp.h>
#include <mbedtls/pk.h>
#include <mbedtls/rsa.h>
#include <mbedtls/sha256.h>
#include <mbedtls/version.h>
#include <mbedtls/x509_crt.h>

#if MBEDTLS_VERSION_NUMBER >= 0x03000000
#include <psa/crypto.h>
#endif

struct tinyfire_public_key {
    mbedtls_pk_context pk;
};

struct tinyfire_sha256 {
    mbedtls_sha256_context context;
};

tinyfire_public_key *tinyfire_public_key_new(const unsigned char *bytes, size_t length, int *error) {
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    psa_crypto_init();
#endif
    tinyfire_public_key *key = calloc(1, sizeof *key);
    /* PEM must end with a NUL that the length counts. */
    unsigned char *copy = malloc(length + 1);
    if (!key || !copy) {
        free(key);
        free(copy);
        *error = MBEDTLS_ERR_PK_ALLOC_FAILED;
        return NULL;
    }
    memcpy(copy, bytes, length);
    copy[length] = 0;
    mbedtls_pk_init(&key->pk);
    int result = mbedtls_pk_parse_public_key(&key->pk, copy, length + 1);
    if (result != 0) result = mbedtls_pk_parse_public_key(&key->pk, copy, length);
    if (result != 0) {
        /* A certificate: its subject's key. */
        mbedtls_x509_crt crt;
        mbedtls_x509_crt_init(&crt);
        int parsed = mbedtls_x509_crt_parse(&crt, copy, length + 1);
        if (parsed != 0) parsed = mbedtls_x509_crt_parse_der(&crt, copy, length);
        if (parsed == 0) {
            unsigned char der[4096];
            int written = mbedtls_pk_write_pubkey_der(&crt.pk, der, sizeof der);
            parsed = written < 0 ? written
                                 : mbedtls_pk_parse_public_key(&key->pk, der + sizeof der - written, (size_t)written);
            if (parsed == 0) result = 0;
        }
        mbedtls_x509_crt_free(&crt);
    }
    free(copy);
    if (result != 0) {
        mbedtls_pk_free(&key->pk);
        free(key);
        *error = result;
        return NULL;
    }
    *error = 0;
    return key;
}

void tinyfire_public_key_free(tinyfire_public_key *key) {
    if (!key) return;
    mbedtls_pk_free(&key->pk);
    free(key);
}

int tinyfire_public_key_kind(const tinyfire_public_key *key) {
    if (mbedtls_pk_can_do(&key->pk, MBEDTLS_PK_ECDSA)) return TINYFIRE_KEY_EC;
    if (mbedtls_pk_can_do(&key->pk, MBEDTLS_PK_RSA)) return TINYFIRE_KEY_RSA;
    return 0;
}

size_t tinyfire_public_key_bits(const tinyfire_public_key *key) { return mbedtls_pk_get_bitlen(&key->pk); }

int tinyfire_public_key_nist_curve(const tinyfire_public_key *key) {
    if (tinyfire_public_key_kind(key) != TINYFIRE_KEY_EC) return 0;
    const mbedtls_ecp_keypair *ec = mbedtls_pk_ec(key->pk);
    if (ec == NULL) return -1;
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    mbedtls_ecp_group_id id = ec->MBEDTLS_PRIVATE(grp).id;
#else
    mbedtls_ecp_group_id id = ec->grp.id;
#endif
    switch (id) {
    case MBEDTLS_ECP_DP_SECP256R1: return 256;
    case MBEDTLS_ECP_DP_SECP384R1: return 384;
    case MBEDTLS_ECP_DP_SECP521R1: return 521;
    default: return -1;
    }
}

int tinyfire_internal_pk_spki_sha256(mbedtls_pk_context *pk, unsigned char digest[32]);

int tinyfire_public_key_spki_sha256(const tinyfire_public_key *key, unsigned char digest[32]) {
    return tinyfire_internal_pk_spki_sha256((mbedtls_pk_context *)&key->pk, digest);
}

int tinyfire_public_key_verify_sha256(const tinyfire_public_key *key, const unsigned char hash[32],
                                      const unsigned char *signature, size_t signature_length) {
    mbedtls_pk_context *pk = (mbedtls_pk_context *)&key->pk;
    if (tinyfire_public_key_kind(key) == TINYFIRE_KEY_EC) {
        return mbedtls_pk_verify(pk, MBEDTLS_MD_SHA256, hash, 32, signature, signature_length);
    }
    if (tinyfire_public_key_kind(key) != TINYFIRE_KEY_RSA) return MBEDTLS_ERR_PK_TYPE_MISMATCH;
    /* The key does not say which padding signed: either is a proof by the key holder. */
    int result = mbedtls_pk_verify(pk, MBEDTLS_MD_SHA256, hash, 32, signature, signature_length);
    if (result == 0) return 0;
    mbedtls_pk_rsassa_pss_options options = {MBEDTLS_MD_SHA256, MBEDTLS_RSA_SALT_LEN_ANY};
    int pss = mbedtls_pk_verify_ext(MBEDTLS_PK_RSASSA_PSS, &options, pk, MBEDTLS_MD_SHA256, hash, 32, signature,
                                    signature_length);
    return pss == 0 ? 0 : result;
}

tinyfire_sha256 *tinyfire_sha256_new(void) {
    tinyfire_sha256 *context = calloc(1, sizeof *context);
    if (!context) return NULL;
    mbedtls_sha256_init(&context->context);
    if (tinyfire_sha256_reset(context) != 0) {
        tinyfire_sha256_free(context);
        return NULL;
    }
    return context;
}

void tinyfire_sha256_free(tinyfire_sha256 *context) {
    if (!context) return;
    mbedtls_sha256_free(&context->context);
    free(context);
}

int tinyfire_sha256_reset(tinyfire_sha256 *context) {
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    return mbedtls_sha256_starts(&context->context, 0);
#else
    return mbedtls_sha256_starts_ret(&context->context, 0);
#endif
}

int tinyfire_sha256_update(tinyfire_sha256 *context, const unsigned char *bytes, size_t length) {
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    return mbedtls_sha256_update(&context->context, bytes, length);
#else
    return mbedtls_sha256_update_ret(&context->context, bytes, length);
#endif
}

int tinyfire_sha256_finish(tinyfire_sha256 *context, unsigned char digest[32]) {
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    return mbedtls_sha256_finish(&context->context, digest);
#else
    return mbedtls_sha256_finish_ret(&context->context, digest);
#endif
}
