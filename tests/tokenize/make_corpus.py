"""Writes the token-equality test's corpus, a few MB of varied text, deterministically.

    python3 make_corpus.py OUT_DIR [MEGABYTES]

OUT_DIR/corpus.jsonl: one document per line ({"text": ...}): Debian's license texts
(/usr/share/common-licenses), C and C++ headers from /usr/include, generated multilingual
text (Latin with accents, Greek, Cyrillic, CJK, Arabic, Hebrew, Devanagari, Thai, emoji,
combining marks, digits, contractions in every case) and whitespace runs (spaces, tabs,
CR LF, long runs, trailing). OUT_DIR/big.txt: one long document (licenses and sources
joined) for the chunked path; OUT_DIR/big.jsonl holds the same text as one document.
OUT_DIR/lines.txt: every line of the corpus that has text, for spm_encode (one sentence per line).
"""
import json
import os
import random
import sys

out_dir = sys.argv[1]
megabytes = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
rng = random.Random(21)
docs = []


def read(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", errors="replace")


lic_dir = "/usr/share/common-licenses"
for name in sorted(os.listdir(lic_dir)):
    p = os.path.join(lic_dir, name)
    if os.path.isfile(p):
        docs.append(read(p))

headers = []
for root in ("/usr/include/c++/12/bits", "/usr/include", "/usr/include/linux"):
    if os.path.isdir(root):
        headers += [os.path.join(root, n) for n in sorted(os.listdir(root))
                    if n.endswith((".h", ".tcc")) and os.path.isfile(os.path.join(root, n))]
source_budget = int(megabytes * 0.45e6)
for p in headers:
    if source_budget <= 0:
        break
    text = read(p)
    docs.append(text)
    source_budget -= len(text)

pools = {
    "latin": "abcdefghijklmnopqrstuvwxyzàáâäçèéêëìíîïñòóôöùúûüßøåæœ",
    "greek": "αβγδεζηθικλμνξοπρστυφχψωάέήίόύώΑΒΓΔΘΛΞΠΣΦΨΩ",
    "cyrillic": "абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГДЕЖЗИЙКЛМНОП",
    "cjk": "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坐集编宝谈府拉黑且随格尽剑讲布杀微怕母调局根曾准团段终乐切级克精哪官示冷域读",
    "kana": "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをんアイウエオカキクケコサシスセソ",
    "hangul": "가나다라마바사아자차카타파하한국어조선말글",
    "arabic": "ابتثجحخدذرزسشصضطظعغفقكلمنهوي",
    "hebrew": "אבגדהוזחטיכלמנסעפצקרשת",
    "devanagari": "अआइईउऊएऐओऔकखगघचछजझटठडढणतथदधनपफबभमयरलवशषसह्ािीुूेैोौं",
    "thai": "กขฃคฅฆงจฉชซฌญฎฏฐฑฒณดตถทธนบปผฝพฟภมยรลวศษสหฬอฮะาำิีึืุู",
    "emoji": "😀😃😄😁😆😅🤣😂🙂🙃😉😊😇🥰😍🤩😘🚀🔥✨🎉👍👋🏽❤️🇫🇷🇯🇵",
    "combining": "e\u0301a\u0300o\u0308n\u0303u\u0302i\u0304",
    "digits": "0123456789٠١٢٣٤٥٦٧٨٩०१२३४५",
    "punct": ".,;:!?-—–()[]{}<>/\\|@#$%^&*_+=~`'\"«»“”‘’…¿¡§¶",
}
contractions = ["'s", "'S", "'t", "'T", "'re", "'RE", "'Re", "'ve", "'VE", "'m", "'M", "'ll", "'LL", "'d", "'D"]
spaces = [" ", "  ", "\t", "\n", "\r\n", "\n\n", " \n", "\t\t", "   \n  ", "\u00a0", "\u3000"]


def word(pool):
    chars = pools[pool]
    w = "".join(rng.choice(chars) for _ in range(rng.randint(1, 12)))
    if rng.random() < 0.15:
        w = w.capitalize() if rng.random() < 0.5 else w.upper()
    if rng.random() < 0.08:
        w += rng.choice(contractions)
    return w


def generated_doc():
    parts = []
    for _ in range(rng.randint(50, 800)):
        r = rng.random()
        if r < 0.70:
            parts.append(word(rng.choice(list(pools))))
        elif r < 0.80:
            parts.append("".join(rng.choice(pools["digits"]) for _ in range(rng.randint(1, 9))))
        elif r < 0.90:
            parts.append("".join(rng.choice(pools["punct"]) for _ in range(rng.randint(1, 4))))
        else:
            parts.append(rng.choice(spaces) * rng.randint(1, 40))
        parts.append(rng.choice(spaces) if rng.random() < 0.3 else " ")
    return "".join(parts)


def whitespace_doc():
    parts = []
    for _ in range(rng.randint(20, 120)):
        parts.append(rng.choice(["x", "word", "if (a) {", "}", "# title", "- item", "1."]))
        parts.append("".join(rng.choice(spaces) for _ in range(rng.randint(1, 300))))
    return "".join(parts)


target = int(megabytes * 1e6)
size = sum(len(d.encode()) for d in docs)
while size < target:
    d = generated_doc() if rng.random() < 0.8 else whitespace_doc()
    docs.append(d)
    size += len(d.encode())
docs.append("")  # an empty document: just its separator

os.makedirs(out_dir, exist_ok=True)
with open(os.path.join(out_dir, "corpus.jsonl"), "w", encoding="utf-8") as f:
    for d in docs:
        f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
big = "\n".join(docs[: len(docs) // 2])
with open(os.path.join(out_dir, "big.txt"), "w", encoding="utf-8", newline="") as f:
    f.write(big)
with open(os.path.join(out_dir, "big.jsonl"), "w", encoding="utf-8") as f:
    f.write(json.dumps({"text": big}, ensure_ascii=False) + "\n")
with open(os.path.join(out_dir, "lines.txt"), "w", encoding="utf-8", newline="\n") as f:
    for d in docs:
        for line in d.replace("\r", "\n").split("\n"):
            if line.strip():
                f.write(line + "\n")
print(f"corpus: {len(docs)} documents, {size / 1e6:.1f} MB; big.txt {len(big.encode()) / 1e6:.1f} MB")
