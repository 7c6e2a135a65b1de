// The corpus of the tokenizer exactness check (tokenizer.test.mjs): texts
// as Buffers (so invalid UTF-8 can be among them), built here from a fixed
// seed so every run checks the same lines.

// A small deterministic PRNG (mulberry32).
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const prose = [
  'The quick brown fox jumps over the lazy dog.',
  "It's a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
  "I'm sure you'LL agree: DON'T panic, we've got it; they'd said so. She'S here.",
  'Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine.',
  '  Leading spaces, trailing spaces   ',
  'Hello\nworld\n\nTwo blank lines\n\n\nand\r\nCRLF\rCR.',
  'e.g. i.e. U.S.A. Mr. Smith — an em dash – an en dash … ellipsis “quotes” ‘single’ «guillemets»',
  'ALL CAPS SENTENCE WITH NUMBERS 123 AND SYMBOLS #$%&*()!',
  'camelCaseIdentifier snake_case_name kebab-case-name PascalCase SCREAMING_SNAKE',
  'https://example.com/path?query=1&other=two#frag user@example.org',
];

const code = [
  'def f(x):\n\treturn x * 2\n\n\nclass A:\n    def __init__(self):\n        self.x = {"a": [1, 2, 3]}\n',
  '#include <stdio.h>\nint main(void) {\n\tprintf("%d\\n", 42);\n\treturn 0;\n}\n',
  'for (let i = 0; i < 10; i++) {\n        console.log(`i=${i}`);\n}\n',
  'x' + ' '.repeat(40) + 'y' + '\t'.repeat(17) + 'z' + '\n'.repeat(9) + 'w',
  '    \t  \n   \t\t\n' + ' '.repeat(200),
  'SELECT id, name FROM users WHERE age >= 18 ORDER BY name;  -- comment',
  '<div class="a"><span>text</span></div> &amp; &lt; &gt;',
  'fn main() -> Result<(), Box<dyn Error>> { let v: Vec<u8> = vec![0xFF; 16]; Ok(()) }',
];

const multilingual = [
  '我们今天去公园散步，天气非常好。人工智能正在改变世界。',
  '日本語のテキスト：ひらがな、カタカナ、漢字を含みます。東京タワーへ行きましょう！',
  'مرحبا بالعالم، هذه جملة باللغة العربية مع أرقام ١٢٣٤٥.',
  'नमस्ते दुनिया, यह हिंदी में एक वाक्य है। क्षत्रिय ज्ञान',
  '안녕하세요 세계, 한국어 문장입니다.',
  'Привет, мир! Это предложение на русском языке. Ёлка.',
  'สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ',
  'Γειά σου Κόσμε, ελληνικά με τόνους: άέήίόύώ ΐΰ.',
  'עברית משמאל לימין עם ניקוד: שָׁלוֹם',
  'Tiếng Việt có dấu: Xin chào thế giới, đường phố Hà Nội.',
  'Ünïcödé façade naïve coöperate Zürich Ærøskøbing straße ß ẞ',
];

const emoji = [
  '👍 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵 ❤️ 🫠 😀😃😄',
  'family: 👩🏾‍🤝‍👩🏻 and 🧑🏿‍💻 at work; keycaps 1️⃣ #️⃣ *️⃣',
  '🤖🤖🤖🤖🤖🤖🤖🤖🤖🤖🤖🤖🤖🤖🤖🤖 end',
];

const marks = [
  'e\u0301 vs \u00e9; A\u030A vs \u00C5; n\u0303 vs \u00F1',
  'Zalgo: Z\u0351\u036B\u0343\u036Aa\u0352\u0344l\u0346g\u0353o\u0358\u035C',
  '\u1100\u1161\u11A8 decomposed Hangul vs \uAC01',
  'ﬁ ﬂ ① ㈱ ｆｕｌｌｗｉｄｔｈ Ⅻ ² ½ ™',
];

const spaces = [
  'a\u180Eb mongolian vowel separator \u180E here',
  'nbsp\u00A0here, en\u2002space, em\u2003space, thin\u2009space, ideographic\u3000space',
  'zero\u200Bwidth\u200Cjoiners\u200Dhere\uFEFFbom',
  'line\u2028separator and paragraph\u2029separator',
  'next\u0085line',
  '\u00A0\u00A0 leading odd spaces',
];

const digits = [];
for (let n = 1; n <= 40; n++) {
  let s = '';
  for (let i = 0; i < n; i++) s += String((i * 7 + n) % 10);
  digits.push(s);
  digits.push(`x${s}y ${s}.5 -${s}`);
}
digits.push('3.14159 2,718 1e-10 0x1F 1_000_000 ١٢٣ ௧௨௩ ½ ²');

export function corpus(specials) {
  const out = [];
  const add = (s) => out.push(Buffer.isBuffer(s) ? s : Buffer.from(s, 'utf8'));
  for (const group of [prose, code, multilingual, emoji, marks, spaces, digits]) group.forEach(add);
  add('');
  add(' ');
  add('\n');
  add('a');
  // Special-token strings inside user text, at the edges and touching words.
  for (const sp of specials) {
    add(sp);
    add(`Hello ${sp} world`);
    add(`${sp}text${sp}`);
    add(` ${sp} `);
  }
  // Long single words (the BPE heap on 100 KB) and a long mixed line.
  add('a'.repeat(100000));
  add('ab'.repeat(50000));
  add('9'.repeat(5000));
  add(' '.repeat(10000));
  const r = rng(12345);
  let word = '';
  for (let i = 0; i < 100000; i++) word += String.fromCharCode(97 + Math.floor(r() * 26));
  add(word);
  add(prose.join(' ').repeat(40));
  // Where a Metaspace word may be cut before U+2581 and where it may not
  // (Gemma 3 has tokens with '>' or U+2581 before U+2581; unknown
  // characters before a space fall back to bytes).
  add('<b> x <0x41> \u2581\u2581a\u2581 b>\u2581c >  >\u2581\u2581 \u{1F600} \u{10FFFF} z\u0301 '.repeat(300));
  // Random text over a mixed alphabet, and random code points.
  const alphabet = [...'abcXYZ 019\t\n.,;!?\'"-_()[]{}<>/\\@#$%^&*+=~`|éüßñçøåæœ漢字かなカナ한글абвгдαβγ١٢٣👍🏽👨‍👩‍👧‍\u0301\u00A0\u180E\u3000'];
  for (let k = 0; k < 60; k++) {
    let s = '';
    const n = 1 + Math.floor(r() * 80);
    for (let i = 0; i < n; i++) s += alphabet[Math.floor(r() * alphabet.length)];
    add(s);
  }
  for (let k = 0; k < 40; k++) {
    let s = '';
    const n = 1 + Math.floor(r() * 30);
    for (let i = 0; i < n; i++) {
      let cp = Math.floor(r() * 0x30000);
      if (cp >= 0xd800 && cp <= 0xdfff) cp = 0x41;
      s += String.fromCodePoint(cp);
    }
    add(s);
  }
  // Invalid UTF-8: lone continuation bytes, truncated sequences, overlongs,
  // surrogates, bytes that never occur (C0, F5..FF), mixed with text.
  const bad = [
    [0x80], [0xc3], [0xe2, 0x82], [0xf0, 0x9f, 0x98], [0xc0, 0xaf], [0xed, 0xa0, 0x80],
    [0xf5, 0x80, 0x80, 0x80], [0xff, 0xfe], [0x41, 0xe2, 0x28, 0xa1, 0x42],
    [0xf0, 0x9f, 0x98, 0x80, 0x80, 0xbf], [0xe0, 0x80, 0x80],
  ];
  for (const b of bad) {
    add(Buffer.from(b));
    add(Buffer.concat([Buffer.from('text '), Buffer.from(b), Buffer.from(' more')]));
  }
  return out;
}
