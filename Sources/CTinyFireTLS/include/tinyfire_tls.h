#ifndef TINYFIRE_TLS_H
#define TINYFIRE_TLS_H
/* TinyFire's narrow door to mbedTLS: the fewest functions that run a TLS client over a
 * non-blocking socket. Every object is opaque and owned by one Swift type. Builds against
 * mbedTLS 2.28 (Debian 12) and 3.x. */
#include <stddef.h>
#include <stdint.h>

/* Returned by handshake/read/write when the socket would block. */
#define TINYFIRE_TLS_WANT_READ  (-0x6900)
#define TINYFIRE_TLS_WANT_WRITE (-0x6880)
/* Returned by read when the peer sent close_notify. */
#define TINYFIRE_TLS_CLOSED 0
/* Returned by read when the TCP connection ended without close_notify (mbedTLS's CONN_EOF):
 * the data so far may have been cut by someone on the path. */
#define TINYFIRE_TLS_EOF (-0x7280)

typedef struct tinyfire_tls_config tinyfire_tls_config;
typedef struct tinyfire_tls tinyfire_tls;
typedef struct tinyfire_tls_session tinyfire_tls_session;

/* Configuration shared by connections: RNG, trust anchors, CRLs, client identity. */
tinyfire_tls_config *tinyfire_tls_config_new(int *error);
void tinyfire_tls_config_free(tinyfire_tls_config *config);
/* PEM or DER; a file may hold several certificates. Returns 0 or an mbedTLS error. */
int tinyfire_tls_config_add_ca_file(tinyfire_tls_config *config, const char *path);
int tinyfire_tls_config_add_ca_directory(tinyfire_tls_config *config, const char *path);
int tinyfire_tls_config_add_crl_file(tinyfire_tls_config *config, const char *path);
int tinyfire_tls_config_set_own_cert(tinyfire_tls_config *config, const char *cert_path, const char *key_path,
                                     const char *password);

/* One TLS client over a connected, non-blocking socket. server_name: SNI and the name the
 * certificate must match (NULL: no SNI, no name check by mbedTLS). */
tinyfire_tls *tinyfire_tls_new(tinyfire_tls_config *config, int fd, const char *server_name, int *error);
/* Bytes for a TLS client that runs over another stream (the origin's TLS inside a proxy's):
 * each returns bytes moved, 0 for the end of the stream, TINYFIRE_TLS_WANT_READ or
 * TINYFIRE_TLS_WANT_WRITE, or another negative value for a failure. */
typedef int (*tinyfire_tls_send_fn)(void *stream, const unsigned char *buffer, size_t length);
typedef int (*tinyfire_tls_recv_fn)(void *stream, unsigned char *buffer, size_t length);
/* One TLS client over `stream`'s callbacks instead of a socket. */
tinyfire_tls *tinyfire_tls_new_over_stream(tinyfire_tls_config *config, void *stream, tinyfire_tls_send_fn send_fn,
                                          tinyfire_tls_recv_fn recv_fn, const char *server_name, int *error);
void tinyfire_tls_free(tinyfire_tls *tls);
/* Offer a saved session for resumption (before the handshake). */
int tinyfire_tls_set_session(tinyfire_tls *tls, const tinyfire_tls_session *session);
/* 0 when done; TINYFIRE_TLS_WANT_READ/WRITE; another negative value is an mbedTLS error. */
int tinyfire_tls_handshake(tinyfire_tls *tls);
/* > 0 bytes; TINYFIRE_TLS_CLOSED; WANT_READ/WRITE; negative error. */
int tinyfire_tls_read(tinyfire_tls *tls, unsigned char *buffer, size_t length);
/* > 0 bytes taken; WANT_READ/WRITE; negative error. */
int tinyfire_tls_write(tinyfire_tls *tls, const unsigned char *buffer, size_t length);
int tinyfire_tls_close_notify(tinyfire_tls *tls);
/* mbedtls_x509_crt_verify flags (0: the chain verified). */
uint32_t tinyfire_tls_verify_flags(const tinyfire_tls *tls);
const char *tinyfire_tls_version(const tinyfire_tls *tls);
const char *tinyfire_tls_ciphersuite(const tinyfire_tls *tls);
/* The peer's chain, leaf first: DER of certificate `index`, or NULL past the end. */
const unsigned char *tinyfire_tls_peer_certificate(const tinyfire_tls *tls, int index, size_t *length);
/* Whether the peer's leaf certificate lists this address (4 or 16 bytes) as an iPAddress
 * subjectAltName. mbedTLS 2.28 does not check those itself. */
int tinyfire_tls_peer_has_ip_address(const tinyfire_tls *tls, const unsigned char *address, size_t length);
/* Whether the handshake resumed the offered session (by id or ticket). */
int tinyfire_tls_session_resumed(const tinyfire_tls *tls);
/* The certificate path mbedTLS built and verified in this handshake, leaf at index 0 up to
 * the trust anchor (or as far as a path could be built): DER of entry `index`, or NULL past
 * the end. Empty after a resumed handshake. Certificates the peer sent that are not on this
 * path are not in it. */
const unsigned char *tinyfire_tls_verified_path(const tinyfire_tls *tls, int index, size_t *length);

/* Saved sessions for resumption. */
tinyfire_tls_session *tinyfire_tls_session_new(void);
void tinyfire_tls_session_free(tinyfire_tls_session *session);
/* Copies the connection's session into `session` (after the handshake). */
int tinyfire_tls_get_session(const tinyfire_tls *tls, tinyfire_tls_session *session);

/* Certificates on their own (DER in, facts out). Each returns 0 or an mbedTLS error. */
/* SHA-256 of the certificate's SubjectPublicKeyInfo (what curl's sha256// pins hash). */
int tinyfire_x509_spki_sha256(const unsigned char *der, size_t length, unsigned char digest[32]);
/* SHA-256 of the SubjectPublicKeyInfo of a PEM or DER public key or certificate file. */
int tinyfire_pk_file_spki_sha256(const char *path, unsigned char digest[32]);
/* Subject and issuer distinguished names as text. */
int tinyfire_x509_names(const unsigned char *der, size_t length, char *subject, size_t subject_length, char *issuer,
                        size_t issuer_length);
/* Certificates in a PEM or DER file, as DER, one after another: calls `each` per certificate. */
int tinyfire_x509_read_file(const char *path, void *context,
                            void (*each)(void *context, const unsigned char *der, size_t length));
/* Verification flags for the chain `ders` (leaf first) against `anchors` (DER), optional CRL
 * file, and the host name (NULL: no name check). 0: trusted. `leaf_issuer_has_crl` (may be
 * NULL) is set to whether the CRL file holds a CRL from the leaf's issuer: mbedTLS skips a
 * certificate whose issuer has none without flagging it. */
int tinyfire_x509_verify(const unsigned char *const *ders, const size_t *lengths, int count,
                         const unsigned char *const *anchors, const size_t *anchor_lengths, int anchor_count,
                         const char *crl_path, const char *host, uint32_t *flags, int *leaf_issuer_has_crl);
/* The configuration's trust anchors as mbedTLS parsed them (CA files and directories): DER of
 * anchor `index`, or NULL past the end. */
const unsigned char *tinyfire_tls_config_anchor(const tinyfire_tls_config *config, int index, size_t *length);

/* mbedTLS's own text for an error code. */
void tinyfire_tls_strerror(int error, char *buffer, size_t length);
/* Verification flags as text, one reason per line. */
void tinyfire_tls_verify_info(uint32_t flags, char *buffer, size_t length);
/* The linked mbedTLS version, e.g. "2.28.3". */
const char *tinyfire_tls_library_version(void);
#endif
