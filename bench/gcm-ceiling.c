/* mbedTLS's own AES-128-GCM speed on 16 KiB records: the ceiling for HTTPS throughput with the
 * same library. Build: cc -O2 bench/gcm-ceiling.c -lmbedcrypto. Prints "MB/s". */
#include <mbedtls/gcm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv) {
    size_t total = (argc > 1 ? strtoull(argv[1], NULL, 10) : 512) * 1024 * 1024;
    enum { record = 16384 };
    static unsigned char input[record], output[record], key[16], iv[12], tag[16];
    memset(input, 0xA5, sizeof input);
    mbedtls_gcm_context gcm;
    mbedtls_gcm_init(&gcm);
    if (mbedtls_gcm_setkey(&gcm, MBEDTLS_CIPHER_ID_AES, key, 128) != 0) return 1;
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (size_t done = 0; done < total; done += record) {
        iv[11]++;
        if (mbedtls_gcm_crypt_and_tag(&gcm, MBEDTLS_GCM_ENCRYPT, record, iv, sizeof iv, NULL, 0, input, output, sizeof tag, tag) != 0)
            return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    double seconds = (double)(end.tv_sec - start.tv_sec) + (double)(end.tv_nsec - start.tv_nsec) / 1e9;
    printf("%.0f\n", (double)total / seconds / 1e6);
    mbedtls_gcm_free(&gcm);
    return output[0] == 42 && tag[0] == 42; /* keep the work observable */
}
