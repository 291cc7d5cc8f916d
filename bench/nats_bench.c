/* NATS JetStream peer of bench/compare, with the NATS C client (Debian's libnats).
 *
 * The Strom side uses librdkafka, a native client that pipelines batched requests, so
 * NATS gets its own native client used the way it is meant to go fast:
 *   publish URL STREAM COUNT SIZE MAX_PENDING
 *       creates STREAM (file storage, subject = STREAM in lower case), then
 *       js_PublishAsync of COUNT messages of SIZE bytes with up to MAX_PENDING
 *       unacknowledged publishes in flight, js_PublishAsyncComplete, and counts the
 *       publishes the server acknowledged (failed ones through the error handler);
 *       the stream must then hold every message.
 *   consume URL STREAM COUNT BATCH
 *       a pull consumer (deliver all, ack all, max ack pending 1,000,000) fetches
 *       BATCH messages per request and acks the last of each batch, until COUNT.
 * Each prints one line: "<mode> <count> <seconds>" (the count is what the server
 * acknowledged or delivered), or an error on stderr with exit code 1.
 * Built by bench/compare_peers.py with: cc -O2 nats_bench.c -lnats
 */
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>
#include <time.h>

static long long failed = 0;

static void on_error(jsCtx *js, jsPubAckErr *pae, void *closure)
{
    (void)js;
    (void)closure;
    if (failed++ == 0)
        fprintf(stderr, "publish failed: %s\n", natsStatus_GetText(pae->Err));
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int fail(const char *what, natsStatus s, jsErrCode jerr)
{
    fprintf(stderr, "%s: %s (JetStream error %d)\n", what, natsStatus_GetText(s), (int)jerr);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: %s publish URL STREAM COUNT SIZE MAX_PENDING | "
                        "consume URL STREAM COUNT BATCH\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1], *url = argv[2], *stream = argv[3];
    long long count = atoll(argv[4]);
    char subject[128];
    snprintf(subject, sizeof subject, "%s", stream);
    for (char *c = subject; *c; c++)
        *c = (char)tolower((unsigned char)*c);

    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsOptions jo;
    jsErrCode jerr = 0;
    natsStatus s = natsConnection_ConnectTo(&nc, url);
    if (s != NATS_OK)
        return fail("connect", s, 0);
    jsOptions_Init(&jo);
    jo.Wait = 30000;

    if (strcmp(mode, "publish") == 0 && argc >= 7) {
        int size = atoi(argv[5]);
        jo.PublishAsync.MaxPending = atoll(argv[6]);
        jo.PublishAsync.ErrHandler = on_error;
        if ((s = natsConnection_JetStream(&js, nc, &jo)) != NATS_OK)
            return fail("jetstream", s, 0);
        jsStreamConfig cfg;
        jsStreamInfo *si = NULL;
        const char *subjects[1] = {subject};
        jsStreamConfig_Init(&cfg);
        cfg.Name = stream;
        cfg.Subjects = subjects;
        cfg.SubjectsLen = 1;
        cfg.Storage = js_FileStorage;
        if ((s = js_AddStream(&si, js, &cfg, NULL, &jerr)) != NATS_OK)
            return fail("add stream", s, jerr);
        jsStreamInfo_Destroy(si);
        char *payload = malloc(size);
        memset(payload, 'x', size);
        double started = now();
        for (long long i = 0; i < count; i++) {
            if ((s = js_PublishAsync(js, subject, payload, size, NULL)) != NATS_OK)
                return fail("publish", s, 0);
        }
        jsPubOptions po;
        jsPubOptions_Init(&po);
        po.MaxWait = 120000;
        if ((s = js_PublishAsyncComplete(js, &po)) != NATS_OK)
            return fail("publish complete", s, 0);
        double elapsed = now() - started;
        if ((s = js_GetStreamInfo(&si, js, stream, NULL, &jerr)) != NATS_OK)
            return fail("stream info", s, jerr);
        unsigned long long stored = si->State.Msgs;
        jsStreamInfo_Destroy(si);
        if (failed || stored != (unsigned long long)count) {
            fprintf(stderr, "%lld failed, stream holds %llu of %lld\n", failed, stored, count);
            return 1;
        }
        printf("publish %llu %.6f\n", stored, elapsed);
        free(payload);
    } else if (strcmp(mode, "consume") == 0) {
        int batch = atoi(argv[5]);
        if ((s = natsConnection_JetStream(&js, nc, &jo)) != NATS_OK)
            return fail("jetstream", s, 0);
        jsSubOptions so;
        jsSubOptions_Init(&so);
        so.Stream = stream;
        so.Config.DeliverPolicy = js_DeliverAll;
        so.Config.AckPolicy = js_AckAll;
        so.Config.MaxAckPending = 1000000;
        natsSubscription *sub = NULL;
        if ((s = js_PullSubscribe(&sub, js, subject, "bench", &jo, &so, &jerr)) != NATS_OK)
            return fail("pull subscribe", s, jerr);
        long long got = 0;
        double started = now();
        while (got < count) {
            natsMsgList list;
            int want = count - got < batch ? (int)(count - got) : batch;
            s = natsSubscription_Fetch(&list, sub, want, 10000, &jerr);
            if (s != NATS_OK)
                return fail("fetch", s, jerr);
            got += list.Count;
            if (list.Count > 0)
                natsMsg_Ack(list.Msgs[list.Count - 1], &jo);
            natsMsgList_Destroy(&list);
        }
        printf("consume %lld %.6f\n", got, now() - started);
        natsSubscription_Destroy(sub);
    } else {
        fprintf(stderr, "unknown mode or missing arguments\n");
        return 2;
    }
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    return 0;
}
