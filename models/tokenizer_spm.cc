/* models/tokenizer_spm.cc — the one C++ file: a thin extern "C" shim over Debian's libsentencepiece
 * (sentencepiece::SentencePieceProcessor) for tokenizer.model files. No exception leaves it. */
#include "models/errf.h"
#include "models/tokenizer_spm.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <new>
#include <string>
#include <vector>

struct tok_spm {
	sentencepiece::SentencePieceProcessor sp;
	bool dummy_prefix;
};

extern "C" {

/* Loads path (or, when path is NULL, the serialized model buf[0 … len)); what = the name for messages. */
static tok_spm *tok_spm_load(const char *path, const void *buf, size_t len, const char *what, char *err,
                             size_t err_len)
{
	try {
		tok_spm *p = new tok_spm();
		auto st = path ? p->sp.Load(path)
		               : p->sp.LoadFromSerializedProto(absl::string_view(static_cast<const char *>(buf), len));
		if (!st.ok()) {
			aah_errf(err, err_len, "%s: %s", what, st.ToString().c_str());
			delete p;
			return nullptr;
		}
		/* The model proto's add_dummy_prefix is not in the public header; what the model does to "a" tells. */
		std::vector<std::string> pieces;
		p->dummy_prefix = p->sp.Encode("a", &pieces).ok() && !pieces.empty() &&
		                  pieces[0].compare(0, 3, "\xE2\x96\x81") == 0;
		return p;
	} catch (const std::exception &e) {
		aah_errf(err, err_len, "%s: %s", what, e.what());
		return nullptr;
	}
}

tok_spm *tok_spm_open(const char *path, char *err, size_t err_len)
{
	return tok_spm_load(path, nullptr, 0, path, err, err_len);
}

tok_spm *tok_spm_open_bytes(const void *buf, size_t len, char *err, size_t err_len)
{
	return tok_spm_load(nullptr, buf, len, "the embedded SentencePiece model", err, err_len);
}

void tok_spm_close(tok_spm *p) { delete p; }

int32_t tok_spm_size(const tok_spm *p) { return p->sp.GetPieceSize(); }

const char *tok_spm_piece(const tok_spm *p, int32_t id, size_t *len)
{
	const std::string &s = p->sp.IdToPiece(id);
	*len = s.size();
	return s.c_str();
}

int tok_spm_kind(const tok_spm *p, int32_t id)
{
	return (p->sp.IsControl(id) ? 1 : 0) | (p->sp.IsUnknown(id) ? 2 : 0) | (p->sp.IsByte(id) ? 4 : 0) |
	       (p->sp.IsUnused(id) ? 8 : 0);
}

int32_t tok_spm_bos(const tok_spm *p) { return p->sp.bos_id(); }
int32_t tok_spm_eos(const tok_spm *p) { return p->sp.eos_id(); }
bool tok_spm_dummy_prefix(const tok_spm *p) { return p->dummy_prefix; }

int64_t tok_spm_encode(const tok_spm *p, const char *s, size_t n, int32_t *ids, int64_t cap, char *err,
                       size_t err_len)
{
	try {
		std::vector<int> out;
		auto st = p->sp.Encode(std::string_view(s, n), &out);   /* const, so safe from several threads */
		if (!st.ok()) {
			aah_errf(err, err_len, "sentencepiece: %s", st.ToString().c_str());
			return -1;
		}
		for (size_t i = 0; i < out.size() && (int64_t)i < cap; i++) ids[i] = out[i];
		return (int64_t)out.size();
	} catch (const std::exception &e) {
		aah_errf(err, err_len, "sentencepiece: %s", e.what());
		return -1;
	}
}

}   /* extern "C" */
