#include "tinyfire_tls.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mbedtls/asn1.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/pk.h>
#include <mbedtls/sha256.h>
#include <mbedtls/ssl.h>
#include <mbedtls/version.h>
#include <mbedtls/x509_crl.h>
#include <mbedtls/x509_crt.h>

#if MBEDTLS_VERSION_NUMBER >= 0x03000000
#include <psa/crypto.h>
#endif

struct tinyfire_tls_config {
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
    mbedtls_ssl_config ssl;
    mbedtls_x509_crt ca;
    mbedtls_x509_crl crl;
    mbedtls_x509_crt own_cert;
    mbedtls_pk_context own_key;
};

/* The longest path mbedTLS builds: leaf, intermediates, trust anchor. */
#define TINYFIRE_TLS_MAX_PATH (MBEDTLS_X509_MAX_INTERMEDIATE_CA + 2)

struct tinyfire_tls {
    mbedtls_ssl_context ssl;
    int fd;
    /* Over another stream instead of a socket (TLS inside a proxy's TLS): its callbacks. */
    void *stream;
    tinyfire_tls_send_fn stream_send;
    tinyfire_tls_recv_fn stream_recv;
    /* A saved session was offered. */
    int offered;
    /* The peer's chain was verified in this handshake (a resumed one verifies nothing). */
    int verified;
    /* The path mbedTLS verified, leaf at 0, copied as its verify callback walks it. */
    unsigned char *path[TINYFIRE_TLS_MAX_PATH];
    size_t path_length[TINYFIRE_TLS_MAX_PATH];
    int path_count;
};

struct tinyfire_tls_session {
    mbedtls_ssl_session session;
};

static int send_callback(void *context, const unsigned char *buffer, size_t length) {
    struct tinyfire_tls *tls = context;
    ssize_t n = send(tls->fd, buffer, length, MSG_NOSIGNAL);
    if (n >= 0) return (int)n;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return MBEDTLS_ERR_SSL_WANT_WRITE;
    if (errno == EINTR) return MBEDTLS_ERR_SSL_WANT_WRITE;
    if (errno == EPIPE || errno == ECONNRESET) return MBEDTLS_ERR_NET_CONN_RESET;
    return MBEDTLS_ERR_NET_SEND_FAILED;
}

static int recv_callback(void *context, unsigned char *buffer, size_t length) {
    struct tinyfire_tls *tls = context;
    ssize_t n = recv(tls->fd, buffer, length, 0);
    if (n >= 0) return (int)n;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return MBEDTLS_ERR_SSL_WANT_READ;
    if (errno == ECONNRESET) return MBEDTLS_ERR_NET_CONN_RESET;
    return MBEDTLS_ERR_NET_RECV_FAILED;
}

/* The stream callbacks answer bytes, 0 for the end of the stream, TINYFIRE_TLS_WANT_READ or
 * TINYFIRE_TLS_WANT_WRITE, or another negative value for a failure. */
static int stream_send_callback(void *context, const unsigned char *buffer, size_t length) {
    struct tinyfire_tls *tls = context;
    int n = tls->stream_send(tls->stream, buffer, length);
    if (n >= 0) return n;
    if (n == TINYFIRE_TLS_WANT_READ) return MBEDTLS_ERR_SSL_WANT_READ;
    if (n == TINYFIRE_TLS_WANT_WRITE) return MBEDTLS_ERR_SSL_WANT_WRITE;
    return MBEDTLS_ERR_NET_SEND_FAILED;
}

static int stream_recv_callback(void *context, unsigned char *buffer, size_t length) {
    struct tinyfire_tls *tls = context;
    int n = tls->stream_recv(tls->stream, buffer, length);
    if (n >= 0) return n;
    if (n == TINYFIRE_TLS_WANT_READ) return MBEDTLS_ERR_SSL_WANT_READ;
    if (n == TINYFIRE_TLS_WANT_WRITE) return MBEDTLS_ERR_SSL_WANT_WRITE;
    return MBEDTLS_ERR_NET_RECV_FAILED;
}

/* Called by mbedTLS for each certificate of the path it built, from the top down to the leaf
 * (depth 0), whatever the outcome; the flags are left as they are (TinyFire decides later). */
static int verify_callback(void *context, mbedtls_x509_crt *crt, int depth, uint32_t *flags) {
    (void)flags;
    struct tinyfire_tls *tls = context;
    tls->verified = 1;
    if (depth < 0 || depth >= TINYFIRE_TLS_MAX_PATH || crt->raw.len == 0) return 0;
    unsigned char *copy = malloc(crt->raw.len);
    if (!copy) return MBEDTLS_ERR_X509_ALLOC_FAILED;
    memcpy(copy, crt->raw.p, crt->raw.len);
    free(tls->path[depth]);
    tls->path[depth] = copy;
    tls->path_length[depth] = crt->raw.len;
    if (depth + 1 > tls->path_count) tls->path_count = depth + 1;
    return 0;
}

static int map_want(int result) {
    if (result == MBEDTLS_ERR_SSL_WANT_READ) return TINYFIRE_TLS_WANT_READ;
    if (result == MBEDTLS_ERR_SSL_WANT_WRITE) return TINYFIRE_TLS_WANT_WRITE;
#if defined(MBEDTLS_ERR_SSL_RECEIVED_NEW_SESSION_TICKET)
    if (result == MBEDTLS_ERR_SSL_RECEIVED_NEW_SESSION_TICKET) return TINYFIRE_TLS_WANT_READ;
#endif
    return result;
}

tinyfire_tls_config *tinyfire_tls_config_new(int *error) {
    struct tinyfire_tls_config *config = calloc(1, sizeof *config);
    if (!config) {
        *error = MBEDTLS_ERR_SSL_ALLOC_FAILED;
        return NULL;
    }
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    psa_crypto_init();
#endif
    mbedtls_entropy_init(&config->entropy);
    mbedtls_ctr_drbg_init(&config->drbg);
    mbedtls_ssl_config_init(&config->ssl);
    mbedtls_x509_crt_init(&config->ca);
    mbedtls_x509_crl_init(&config->crl);
    mbedtls_x509_crt_init(&config->own_cert);
    mbedtls_pk_init(&config->own_key);
    static const char personalization[] = "tinyfire";
    int result = mbedtls_ctr_drbg_seed(&config->drbg, mbedtls_entropy_func, &config->entropy,
                                       (const unsigned char *)personalization, sizeof personalization - 1);
    if (result == 0) {
        result = mbedtls_ssl_config_defaults(&config->ssl, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
                                             MBEDTLS_SSL_PRESET_DEFAULT);
    }
    if (result != 0) {
        *error = result;
        tinyfire_tls_config_free(config);
        return NULL;
    }
    mbedtls_ssl_conf_rng(&config->ssl, mbedtls_ctr_drbg_random, &config->drbg);
    /* The chain is verified during the handshake and its flags recorded; TinyFire's trust
     * evaluators decide afterwards, before any request byte is sent. */
    mbedtls_ssl_conf_authmode(&config->ssl, MBEDTLS_SSL_VERIFY_OPTIONAL);
    mbedtls_ssl_conf_ca_chain(&config->ssl, &config->ca, NULL);
#if MBEDTLS_VERSION_NUMBER < 0x03000000
    /* TLS 1.2 is the floor; 2.28 has no TLS 1.3 client. */
    mbedtls_ssl_conf_min_version(&config->ssl, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
#else
    mbedtls_ssl_conf_min_tls_version(&config->ssl, MBEDTLS_SSL_VERSION_TLS1_2);
#endif
#if defined(MBEDTLS_SSL_SESSION_TICKETS)
    mbedtls_ssl_conf_session_tickets(&config->ssl, MBEDTLS_SSL_SESSION_TICKETS_ENABLED);
#endif
    *error = 0;
    return config;
}

void tinyfire_tls_config_free(tinyfire_tls_config *config) {
    if (!config) return;
    mbedtls_pk_free(&config->own_key);
    mbedtls_x509_crt_free(&config->own_cert);
    mbedtls_x509_crl_free(&config->crl);
    mbedtls_x509_crt_free(&config->ca);
    mbedtls_ssl_config_free(&config->ssl);
    mbedtls_ctr_drbg_free(&config->drbg);
    mbedtls_entropy_free(&config->entropy);
    free(config);
}

int tinyfire_tls_config_add_ca_file(tinyfire_tls_config *config, const char *path) {
    int result = mbedtls_x509_crt_parse_file(&config->ca, path);
    /* A positive result counts certificates that failed to parse; the others were added. */
    return result < 0 ? result : 0;
}

int tinyfire_tls_config_add_ca_directory(tinyfire_tls_config *config, const char *path) {
    int result = mbedtls_x509_crt_parse_path(&config->ca, path);
    return result < 0 ? result : 0;
}

int tinyfire_tls_config_add_crl_file(tinyfire_tls_config *config, const char *path) {
    int result = mbedtls_x509_crl_parse_file(&config->crl, path);
    if (result == 0) mbedtls_ssl_conf_ca_chain(&config->ssl, &config->ca, &config->crl);
    return result;
}

int tinyfire_tls_config_set_own_cert(tinyfire_tls_config *config, const char *cert_path, const char *key_path,
                                     const char *password) {
    int result = mbedtls_x509_crt_parse_file(&config->own_cert, cert_path);
    if (result != 0) return result < 0 ? result : MBEDTLS_ERR_X509_CERT_VERIFY_FAILED;
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    result = mbedtls_pk_parse_keyfile(&config->own_key, key_path, password, mbedtls_ctr_drbg_random, &config->drbg);
#else
    result = mbedtls_pk_parse_keyfile(&config->own_key, key_path, password);
#endif
    if (result != 0) return result;
    return mbedtls_ssl_conf_own_cert(&config->ssl, &config->own_cert, &config->own_key);
}

tinyfire_tls *tinyfire_tls_new(tinyfire_tls_config *config, int fd, const char *server_name, int *error) {
    struct tinyfire_tls *tls = calloc(1, sizeof *tls);
    if (!tls) {
        *error = MBEDTLS_ERR_SSL_ALLOC_FAILED;
        return NULL;
    }
    tls->fd = fd;
    mbedtls_ssl_init(&tls->ssl);
    int result = mbedtls_ssl_setup(&tls->ssl, &config->ssl);
    /* Called even with NULL: mbedTLS >= 3.6.3 refuses to verify a certificate unless the
     * hostname was set, and NULL explicitly asks for no name check (IP hosts: TinyFire checks
     * the iPAddress entries itself). */
    if (result == 0) result = mbedtls_ssl_set_hostname(&tls->ssl, server_name);
    if (result != 0) {
        *error = result;
        tinyfire_tls_free(tls);
        return NULL;
    }
    mbedtls_ssl_set_bio(&tls->ssl, tls, send_callback, recv_callback, NULL);
    mbedtls_ssl_set_verify(&tls->ssl, verify_callback, tls);
    *error = 0;
    return tls;
}

tinyfire_tls *tinyfire_tls_new_over_stream(tinyfire_tls_config *config, void *stream, tinyfire_tls_send_fn send_fn,
                                          tinyfire_tls_recv_fn recv_fn, const char *server_name, int *error) {
    tinyfire_tls *tls = tinyfire_tls_new(config, -1, server_name, error);
    if (!tls) return NULL;
    tls->stream = stream;
    tls->stream_send = send_fn;
    tls->stream_recv = recv_fn;
    mbedtls_ssl_set_bio(&tls->ssl, tls, stream_send_callback, stream_recv_callback, NULL);
    return tls;
}

void tinyfire_tls_free(tinyfire_tls *tls) {
    if (!tls) return;
    mbedtls_ssl_free(&tls->ssl);
    for (int i = 0; i < TINYFIRE_TLS_MAX_PATH; i++) free(tls->path[i]);
    free(tls);
}

const unsigned char *tinyfire_tls_verified_path(const tinyfire_tls *tls, int index, size_t *length) {
    if (index < 0 || index >= tls->path_count || !tls->path[index]) return NULL;
    *length = tls->path_length[index];
    return tls->path[index];
}

int tinyfire_tls_set_session(tinyfire_tls *tls, const tinyfire_tls_session *session) {
    int result = mbedtls_ssl_set_session(&tls->ssl, &session->session);
    tls->offered = result == 0;
    return result;
}

int tinyfire_tls_handshake(tinyfire_tls *tls) { return map_want(mbedtls_ssl_handshake(&tls->ssl)); }

int tinyfire_tls_read(tinyfire_tls *tls, unsigned char *buffer, size_t length) {
    int result = mbedtls_ssl_read(&tls->ssl, buffer, length);
    if (result == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY) return TINYFIRE_TLS_CLOSED;
    /* mbedTLS answers 0 for a bare TCP end of stream (no close_notify). */
    if (result == 0) return TINYFIRE_TLS_EOF;
    return map_want(result);
}

int tinyfire_tls_write(tinyfire_tls *tls, const unsigned char *buffer, size_t length) {
    return map_want(mbedtls_ssl_write(&tls->ssl, buffer, length));
}

int tinyfire_tls_close_notify(tinyfire_tls *tls) { return map_want(mbedtls_ssl_close_notify(&tls->ssl)); }

uint32_t tinyfire_tls_verify_flags(const tinyfire_tls *tls) { return mbedtls_ssl_get_verify_result(&tls->ssl); }

const char *tinyfire_tls_version(const tinyfire_tls *tls) { return mbedtls_ssl_get_version(&tls->ssl); }

const char *tinyfire_tls_ciphersuite(const tinyfire_tls *tls) { return mbedtls_ssl_get_ciphersuite(&tls->ssl); }

const unsigned char *tinyfire_tls_peer_certificate(const tinyfire_tls *tls, int index, size_t *length) {
    const mbedtls_x509_crt *crt = mbedtls_ssl_get_peer_cert(&tls->ssl);
    for (int i = 0; crt && i < index; i++) crt = crt->next;
    if (!crt || crt->raw.len == 0) return NULL;
    *length = crt->raw.len;
    return crt->raw.p;
}

int tinyfire_tls_peer_has_ip_address(const tinyfire_tls *tls, const unsigned char *address, size_t length) {
    const mbedtls_x509_crt *crt = mbedtls_ssl_get_peer_cert(&tls->ssl);
    if (!crt) return 0;
    for (const mbedtls_x509_sequence *name = &crt->subject_alt_names; name && name->buf.p; name = name->next) {
        if (name->buf.tag == (MBEDTLS_ASN1_CONTEXT_SPECIFIC | 7) && name->buf.len == length &&
            memcmp(name->buf.p, address, length) == 0)
            return 1;
    }
    return 0;
}

int tinyfire_tls_session_resumed(const tinyfire_tls *tls) {
    /* A full handshake verifies the peer's certificate; an abbreviated one (session id or
     * ticket alike) receives none. Comparing session ids cannot tell: with a ticket the
     * client sends a fresh random id. */
    return tls->offered && !tls->verified;
}

tinyfire_tls_session *tinyfire_tls_session_new(void) {
    struct tinyfire_tls_session *session = calloc(1, sizeof *session);
    if (session) mbedtls_ssl_session_init(&session->session);
    return session;
}

void tinyfire_tls_session_free(tinyfire_tls_session *session) {
    if (!session) return;
    mbedtls_ssl_session_free(&session->session);
    free(session);
}

int tinyfire_tls_get_session(const tinyfire_tls *tls, tinyfire_tls_session *session) {
    mbedtls_ssl_session_free(&session->session);
    mbedtls_ssl_session_init(&session->session);
    return mbedtls_ssl_get_session(&tls->ssl, &session->session);
}

static int sha256(const unsigned char *input, size_t length, unsigned char digest[32]) {
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    return mbedtls_sha256(input, length, digest, 0);
#else
    return mbedtls_sha256_ret(input, length, digest, 0);
#endif
}

static int pk_spki_sha256(mbedtls_pk_context *pk, unsigned char digest[32]);
/* Shared with tinyfire_crypto.c (not in a public header). */
int tinyfire_internal_pk_spki_sha256(mbedtls_pk_context *pk, unsigned char digest[32]);
int tinyfire_internal_pk_spki_sha256(mbedtls_pk_context *pk, unsigned char digest[32]) { return pk_spki_sha256(pk, digest); }

static int pk_spki_sha256(mbedtls_pk_context *pk, unsigned char digest[32]) {
    unsigned char buffer[2048];
    /* mbedtls_pk_write_pubkey_der writes at the end of the buffer. */
    int written = mbedtls_pk_write_pubkey_der(pk, buffer, sizeof buffer);
    if (written < 0) return written;
    return sha256(buffer + sizeof buffer - written, (size_t)written, digest);
}

int tinyfire_x509_spki_sha256(const unsigned char *der, size_t length, unsigned char digest[32]) {
    mbedtls_x509_crt crt;
    mbedtls_x509_crt_init(&crt);
    int result = mbedtls_x509_crt_parse_der(&crt, der, length);
    if (result == 0) result = pk_spki_sha256(&crt.pk, digest);
    mbedtls_x509_crt_free(&crt);
    return result;
}

int tinyfire_pk_file_spki_sha256(const char *path, unsigned char digest[32]) {
    mbedtls_pk_context pk;
    mbedtls_pk_init(&pk);
    int result = mbedtls_pk_parse_public_keyfile(&pk, path);
    if (result != 0) {
        /* Not a bare public key: a certificate file. */
        mbedtls_x509_crt crt;
        mbedtls_x509_crt_init(&crt);
        result = mbedtls_x509_crt_parse_file(&crt, path);
        if (result == 0) result = pk_spki_sha256(&crt.pk, digest);
        mbedtls_x509_crt_free(&crt);
        mbedtls_pk_free(&pk);
        return result;
    }
    result = pk_spki_sha256(&pk, digest);
    mbedtls_pk_free(&pk);
    return result;
}

int tinyfire_x509_names(const unsigned char *der, size_t length, char *subject, size_t subject_length, char *issuer,
                        size_t issuer_length) {
    mbedtls_x509_crt crt;
    mbedtls_x509_crt_init(&crt);
    int result = mbedtls_x509_crt_parse_der(&crt, der, length);
    if (result == 0) {
        if (mbedtls_x509_dn_gets(subject, subject_length, &crt.subject) < 0) subject[0] = 0;
        if (mbedtls_x509_dn_gets(issuer, issuer_length, &crt.issuer) < 0) issuer[0] = 0;
    }
    mbedtls_x509_crt_free(&crt);
    return result;
}

int tinyfire_x509_read_file(const char *path, void *context,
                            void (*each)(void *context, const unsigned char *der, size_t length)) {
    mbedtls_x509_crt crt;
    mbedtls_x509_crt_init(&crt);
    int result = mbedtls_x509_crt_parse_file(&crt, path);
    if (result >= 0) {
        for (const mbedtls_x509_crt *c = &crt; c && c->raw.len > 0; c = c->next) each(context, c->raw.p, c->raw.len);
        result = 0;
    }
    mbedtls_x509_crt_free(&crt);
    return result;
}

int tinyfire_x509_verify(const unsigned char *const *ders, const size_t *lengths, int count,
                         const unsigned char *const *anchors, const size_t *anchor_lengths, int anchor_count,
                         const char *crl_path, const char *host, uint32_t *flags, int *leaf_issuer_has_crl) {
    mbedtls_x509_crt chain, trusted;
    mbedtls_x509_crl crl;
    mbedtls_x509_crt_init(&chain);
    mbedtls_x509_crt_init(&trusted);
    mbedtls_x509_crl_init(&crl);
    int result = 0;
    for (int i = 0; i < count && result == 0; i++) result = mbedtls_x509_crt_parse_der(&chain, ders[i], lengths[i]);
    for (int i = 0; i < anchor_count && result == 0; i++)
        result = mbedtls_x509_crt_parse_der(&trusted, anchors[i], anchor_lengths[i]);
    int has_crl = 0;
    if (result == 0 && crl_path) {
        result = mbedtls_x509_crl_parse_file(&crl, crl_path);
        has_crl = result == 0;
    }
    if (leaf_issuer_has_crl) {
        /* mbedTLS skips, without a flag, a certificate whose issuer has no CRL in the list. */
        *leaf_issuer_has_crl = 0;
        for (const mbedtls_x509_crl *c = &crl; has_crl && c && c->raw.len > 0; c = c->next) {
            if (c->issuer_raw.len == chain.issuer_raw.len &&
                memcmp(c->issuer_raw.p, chain.issuer_raw.p, chain.issuer_raw.len) == 0) {
                *leaf_issuer_has_crl = 1;
                break;
            }
        }
    }
    if (result == 0) {
        result = mbedtls_x509_crt_verify(&chain, &trusted, has_crl ? &crl : NULL, host, flags, NULL, NULL);
        if (result == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED) result = 0;
    }
    mbedtls_x509_crl_free(&crl);
    mbedtls_x509_crt_free(&trusted);
    mbedtls_x509_crt_free(&chain);
    return result;
}

const unsigned char *tinyfire_tls_config_anchor(const tinyfire_tls_config *config, int index, size_t *length) {
    const mbedtls_x509_crt *crt = &config->ca;
    for (int i = 0; crt && i < index; i++) crt = crt->next;
    if (!crt || crt->raw.len == 0) return NULL;
    *length = crt->raw.len;
    return crt->raw.p;
}

void tinyfire_tls_strerror(int error, char *buffer, size_t length) { mbedtls_strerror(error, buffer, length); }

void tinyfire_tls_verify_info(uint32_t flags, char *buffer, size_t length) {
    int n = mbedtls_x509_crt_verify_info(buffer, length, "", flags);
    if (n < 0 && length > 0) buffer[0] = 0;
}

const char *tinyfire_tls_library_version(void) { return MBEDTLS_VERSION_STRING; }
