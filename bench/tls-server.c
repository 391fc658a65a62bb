/*
 * A one-file HTTPS server for the emulated boards of bench/board-rss.sh, which have busybox and no
 * TLS server: mbedTLS 2.28 (the sysroot's, the same library the clients link), one connection at
 * a time, TLS 1.2 with ECDHE-ECDSA-AES128-GCM-SHA256 (the suite bench/get1k.sh pins on nginx).
 * Every request, whatever its target, gets FILE's bytes (at most 64 KiB) and the connection ends.
 *
 *   tls-server PORT CERT.pem KEY.pem FILE
 *
 * A bench fixture, not a server: no keep-alive, no request parsing beyond the blank line.
 */
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>
#include <stdio.h>
#include <string.h>

static int write_all(mbedtls_ssl_context *ssl, const unsigned char *bytes, size_t count) {
    while (count > 0) {
        int written = mbedtls_ssl_write(ssl, bytes, count);
        if (written == MBEDTLS_ERR_SSL_WANT_READ || written == MBEDTLS_ERR_SSL_WANT_WRITE) continue;
        if (written <= 0) return -1;
        bytes += written;
        count -= (size_t)written;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s PORT CERT.pem KEY.pem FILE\n", argv[0]);
        return 64;
    }
    static unsigned char body[65536];
    FILE *file = fopen(argv[4], "rb");
    if (file == NULL) {
        perror(argv[4]);
        return 66;
    }
    size_t body_count = fread(body, 1, sizeof body, file);
    fclose(file);

    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
    mbedtls_x509_crt certificate;
    mbedtls_pk_context key;
    mbedtls_ssl_config config;
    mbedtls_net_context listener;
    mbedtls_entropy_init(&entropy);
    mbedtls_ctr_drbg_init(&drbg);
    mbedtls_x509_crt_init(&certificate);
    mbedtls_pk_init(&key);
    mbedtls_ssl_config_init(&config);
    mbedtls_net_init(&listener);
    static const int suites[] = {MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, 0};
    int status;
    if ((status = mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &entropy, (const unsigned char *)"tls-server", 10)) != 0 ||
        (status = mbedtls_x509_crt_parse_file(&certificate, argv[2])) != 0 ||
        (status = mbedtls_pk_parse_keyfile(&key, argv[3], NULL)) != 0 ||
        (status = mbedtls_ssl_config_defaults(&config, MBEDTLS_SSL_IS_SERVER, MBEDTLS_SSL_TRANSPORT_STREAM,
                                              MBEDTLS_SSL_PRESET_DEFAULT)) != 0) {
        fprintf(stderr, "tls-server: setup failed: -0x%04x\n", (unsigned)-status);
        return 1;
    }
    mbedtls_ssl_conf_rng(&config, mbedtls_ctr_drbg_random, &drbg);
    mbedtls_ssl_conf_ciphersuites(&config, suites);
    mbedtls_ssl_conf_min_version(&config, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
    mbedtls_ssl_conf_max_version(&config, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
    if ((status = mbedtls_ssl_conf_own_cert(&config, &certificate, &key)) != 0 ||
        (status = mbedtls_net_bind(&listener, "127.0.0.1", argv[1], MBEDTLS_NET_PROTO_TCP)) != 0) {
        fprintf(stderr, "tls-server: cannot listen: -0x%04x\n", (unsigned)-status);
        return 1;
    }
    char head[128];
    int head_count = snprintf(head, sizeof head,
                              "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %zu\r\n"
                              "Connection: close\r\n\r\n",
                              body_count);
    for (;;) {
        mbedtls_net_context client;
        mbedtls_net_init(&client);
        if (mbedtls_net_accept(&listener, &client, NULL, 0, NULL) != 0) continue;
        mbedtls_ssl_context ssl;
        mbedtls_ssl_init(&ssl);
        if (mbedtls_ssl_setup(&ssl, &config) == 0) {
            mbedtls_ssl_set_bio(&ssl, &client, mbedtls_net_send, mbedtls_net_recv, NULL);
            while ((status = mbedtls_ssl_handshake(&ssl)) == MBEDTLS_ERR_SSL_WANT_READ || status == MBEDTLS_ERR_SSL_WANT_WRITE) {}
            // The request: read until its blank line (a head larger than the buffer is cut off).
            unsigned char request[4096];
            size_t have = 0;
            while (status == 0 && have < sizeof request - 1) {
                int got = mbedtls_ssl_read(&ssl, request + have, sizeof request - 1 - have);
                if (got == MBEDTLS_ERR_SSL_WANT_READ || got == MBEDTLS_ERR_SSL_WANT_WRITE) continue;
                if (got <= 0) {
                    status = -1;
                    break;
                }
                have += (size_t)got;
                request[have] = 0;
                if (strstr((const char *)request, "\r\n\r\n") != NULL) break;
            }
            if (status == 0 && write_all(&ssl, (const unsigned char *)head, (size_t)head_count) == 0 &&
                write_all(&ssl, body, body_count) == 0) {
                mbedtls_ssl_close_notify(&ssl);
            }
        }
        mbedtls_ssl_free(&ssl);
        mbedtls_net_free(&client);
    }
}
