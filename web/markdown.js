// Markdown of model replies, rendered as DOM nodes: every piece of the reply becomes text
// (textContent), never HTML, so a reply holding `<script>` or `<img onerror>` shows as text.
// Covers what chat models write: fenced code (an unclosed fence while streaming included),
// headings, bullet and numbered lists, quotes, paragraphs; inline code, bold, italics and
// http(s) links.

const el = (tag, text) => {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  return e;
};

// Inline spans: `code`, **bold**, *italic* / _italic_, [text](http...).
const INLINE = /(`+)([^`]|[^`][^]*?[^`])\1(?!`)|\*\*([^*]+?)\*\*|__([^_]+?)__|\*([^*\s][^*]*?)\*|\b_([^_\s][^_]*?)_\b|\[([^\]]+)\]\((https?:\/\/[^\s)]+)\)/g;

function inline(parent, text) {
  let at = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > at) parent.append(text.slice(at, m.index));
    if (m[2] !== undefined) parent.append(el('code', m[2]));
    else if (m[3] !== undefined || m[4] !== undefined) {
      const b = el('strong');
      inline(b, m[3] ?? m[4]);
      parent.append(b);
    } else if (m[5] !== undefined || m[6] !== undefined) {
      const i = el('em');
      inline(i, m[5] ?? m[6]);
      parent.append(i);
    } else {
      const a = el('a', m[7]);
      a.href = m[8];
      a.rel = 'noopener noreferrer';
      a.target = '_blank';
      parent.append(a);
    }
    at = m.index + m[0].length;
  }
  if (at < text.length) parent.append(text.slice(at));
}

// Lines joined into one block with line breaks.
function lines(parent, list) {
  list.forEach((l, i) => {
    if (i) parent.append(el('br'));
    inline(parent, l);
  });
}

/** Replaces the children of `target` with `source` rendered. */
export function renderMarkdown(target, source) {
  const out = [];
  const src = source.replace(/\r\n?/g, '\n').split('\n');
  let i = 0;
  while (i < src.length) {
    const line = src[i];
    const fence = line.match(/^\s*(```+|~~~+)\s*([\w+#.-]*)/);
    if (fence) {
      const body = [];
      i++;
      while (i < src.length && !src[i].trim().startsWith(fence[1])) body.push(src[i++]);
      i++; // the closing fence (absent while a reply streams)
      const pre = el('pre');
      const code = el('code', body.join('\n'));
      if (fence[2]) code.dataset.lang = fence[2];
      pre.append(code);
      out.push(pre);
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      const h = el(`h${Math.min(6, heading[1].length + 2)}`);
      inline(h, heading[2]);
      out.push(h);
      i++;
      continue;
    }
    const item = /^\s*([-*+]|\d+[.)])\s+(.*)$/;
    if (item.test(line)) {
      const ordered = /\d/.test(line.match(item)[1]);
      const list = el(ordered ? 'ol' : 'ul');
      while (i < src.length && item.test(src[i]) && /\d/.test(src[i].match(item)[1]) === ordered) {
        const li = el('li');
        inline(li, src[i].match(item)[2]);
        list.append(li);
        i++;
      }
      out.push(list);
      continue;
    }
    if (/^\s*>/.test(line)) {
      const quote = [];
      while (i < src.length && /^\s*>/.test(src[i])) quote.push(src[i++].replace(/^\s*>\s?/, ''));
      const q = el('blockquote');
      lines(q, quote);
      out.push(q);
      continue;
    }
    if (!line.trim()) {
      i++;
      continue;
    }
    const para = [];
    while (i < src.length && src[i].trim() && !/^\s*(```|~~~|#{1,6}\s|>|[-*+]\s|\d+[.)]\s)/.test(src[i])) {
      para.push(src[i++]);
    }
    if (para.length === 0) para.push(src[i++]);
    const p = el('p');
    lines(p, para);
    out.push(p);
  }
  target.replaceChildren(...out);
}
