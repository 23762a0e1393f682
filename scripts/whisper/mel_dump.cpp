// Dump whisper.cpp's log-mel spectrogram of an audio file as JSON.
//
// whisper.h has no getter for the mel, so this file includes src/whisper.cpp
// directly (a unity build) and reads the state's mel after whisper_pcm_to_mel.
// Audio is read with whisper-cli's own reader (examples/common-whisper.cpp),
// so the samples are exactly the ones whisper-cli transcribes.
//
// Output: {"clip", "n_samples", "n_mel", "n_len", "n_len_org", "ranges": [
//   {"start": frame, "mel": [[bin 0 values...], ..., [bin n_mel-1 values...]]}]}
// with values rounded to 5 decimals. Ranges: frames 0..99 and the 50 frames
// either side of n_len_org (where the audio ends and the 30 s zero padding starts).
//
// Build (see gen_fixtures.sh):
//   g++ -O2 -std=c++17 -DGGML_USE_CPU -DWHISPER_VERSION='"1.8.5"' \
//       -I$W/include -I$W/src -I$W/ggml/include mel_dump.cpp \
//       $W/build/examples/libcommon.a $W/build/ggml/src/libggml.a \
//       $W/build/ggml/src/libggml-cpu.a $W/build/ggml/src/libggml-base.a -lpthread
// Usage: mel_dump MODEL.bin AUDIO_FILE > out.json

#include "whisper.cpp"

// From examples/common-whisper.h (not included: its to_timestamp clashes with whisper.cpp's).
bool read_audio_data(const std::string & fname, std::vector<float> & pcmf32,
                     std::vector<std::vector<float>> & pcmf32s, bool stereo);

#include <cstdio>

static void dump_range(const whisper_mel & mel, int start, int count, bool last) {
    start = std::max(0, start);
    count = std::min(count, mel.n_len - start);
    printf("    {\"start\": %d, \"mel\": [\n", start);
    for (int j = 0; j < mel.n_mel; j++) {
        printf("      [");
        for (int i = 0; i < count; i++) {
            printf("%s%.5f", i ? "," : "", mel.data[(size_t) j * mel.n_len + start + i]);
        }
        printf("]%s\n", j + 1 < mel.n_mel ? "," : "");
    }
    printf("    ]}%s\n", last ? "" : ",");
}

int main(int argc, char ** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL.bin AUDIO_FILE\n", argv[0]);
        return 1;
    }
    whisper_log_set([](enum ggml_log_level, const char *, void *) {}, nullptr);

    std::vector<float> pcm;
    std::vector<std::vector<float>> pcm_stereo;
    if (!read_audio_data(argv[2], pcm, pcm_stereo, false)) {
        fprintf(stderr, "failed to read %s\n", argv[2]);
        return 1;
    }

    whisper_context_params cparams = whisper_context_default_params();
    cparams.use_gpu = false;
    whisper_context * ctx = whisper_init_from_file_with_params(argv[1], cparams);
    if (!ctx) {
        fprintf(stderr, "failed to load %s\n", argv[1]);
        return 1;
    }
    if (whisper_pcm_to_mel(ctx, pcm.data(), (int) pcm.size(), 1) != 0) {
        fprintf(stderr, "whisper_pcm_to_mel failed\n");
        return 1;
    }
    const whisper_mel & mel = ctx->state->mel;

    const char * clip = strrchr(argv[2], '/') ? strrchr(argv[2], '/') + 1 : argv[2];
    printf("{\n  \"clip\": \"%s\",\n  \"whisper_cpp_version\": \"%s\",\n", clip, whisper_version());
    printf("  \"n_samples\": %zu,\n  \"n_mel\": %d,\n  \"n_len\": %d,\n  \"n_len_org\": %d,\n",
           pcm.size(), mel.n_mel, mel.n_len, mel.n_len_org);
    printf("  \"layout\": \"mel[bin][frame - start]\",\n  \"ranges\": [\n");
    dump_range(mel, 0, 100, false);
    dump_range(mel, mel.n_len_org - 50, 100, true);
    printf("  ]\n}\n");

    whisper_free(ctx);
    return 0;
}
