// A small, safe markdown renderer for the Roundtable web client.
//
// Safety model: the input is never parsed as HTML. Every piece of text ends up in a DOM text
// node (`document.createTextNode` / `textContent`), which is the DOM equivalent of escaping
// HTML first: `<img onerror=…>` shows up as those literal characters. Only a fixed set of
// elements is ever created: p, br, strong, em, del, code, pre, ul, ol, li, blockquote, hr,
// h3-h6, table/thead/tbody/tr/th/td and a (http/https links only, rel="noopener noreferrer").
//
// Supported: paragraphs (single newlines are kept as line breaks, as chat answers expect),
// **bold** / __bold__, *italic* / _italic_, ~~strike~~, `code`, fenced code blocks (``` or ~~~),
// ATX headings, block quotes, nested bullet / numbered lists, pipe tables, horizontal rules,
// [links](https://…), <https://…> and bare http(s) URLs, backslash escapes.
//
// Called by render.js for `markdown` DisplayContent; app.js also exposes it to the browser
// tests as window.RoundtableMarkdown.
import { el } from "./dom.js";

const MAX_INPUT = 200000;
const MAX_DEPTH = 8;

/** Returns the URL string if it is an absolute http(s) URL, otherwise null. */
export function safeHref(raw) {
  let text = String(raw || "").trim();
  if (text.startsWith("<") && text.endsWith(">")) text = text.slice(1, -1).trim();
  if (!/^https?:\/\//i.test(text)) return null;
  try {
    const url = new URL(text);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  } catch {
    return null;
  }
}

function link(href, label) {
  const a = el("a");
  a.href = href;
  a.rel = "noopener noreferrer";
  a.target = "_blank";
  if (typeof label === "string") a.textContent = label;
  else a.append(label);
  return a;
}

// ---- inline ---------------------------------------------------------------------------

// Tried from the current position; the earliest match wins, ties go to the earlier rule.
// Linear time: every span a rule may cover is bounded (SPAN characters: emphasis, code,
// link labels and URLs longer than that are shown as text), so one search costs at most
// SPAN steps per start position, and renderInline remembers each rule's next match (or that
// it has none) instead of searching again from every position.
const SPAN = 1000;
const INLINE_RULES = [
  { name: "escape", re: /\\([\\`*_{}[\]()#+\-.!~|>])/g },
  { name: "code", re: /(`+)([\s\S]{0,1000}?[^`])\1(?!`)/g },
  { name: "autolink", re: /<(https?:\/\/[^\s<>]{1,1000})>/gi },
  // Link destinations may hold one level of balanced parentheses, as in CommonMark.
  { name: "image", re: /!\[([^\]]{0,1000})\]\(\s*(<[^>]{0,1000}>|(?:[^\s()]|\([^\s()]{0,1000}\)){1,1000})(?:\s+"[^"]{0,1000}")?\s*\)/g },
  { name: "link", re: /\[((?:[^[\]]|\[[^[\]]{0,1000}\]){0,1000})\]\(\s*(<[^>]{0,1000}>|(?:[^\s()]|\([^\s()]{0,1000}\)){1,1000})(?:\s+"[^"]{0,1000}")?\s*\)/g },
  { name: "url", re: /\bhttps?:\/\/[^\s<>"'`]{0,1000}[^\s<>"'`.,;:!?)\]]/gi },
  { name: "strong", re: /\*\*(?=\S)([\s\S]{0,1000}?\S)\*\*|__(?=\S)([\s\S]{0,1000}?\S)__(?!\w)/g },
  { name: "strike", re: /~~(?=\S)([\s\S]{0,1000}?\S)~~/g },
  { name: "em", re: /\*(?=[^\s*])([\s\S]{0,1000}?[^\s*\\])\*(?!\*)|(?<![\w\\])_(?=[^\s_])([\s\S]{0,1000}?[^\s_\\])_(?!\w)/g },
];
const NO_MATCH = { index: Infinity };

/** Appends the inline rendering of `text` to `parent`. */
export function renderInline(text, parent, depth = 0, inLink = false) {
  const source = String(text);
  // next[i]: rule i's first match at or after the position it was searched from (valid
  // while its index >= pos), or NO_MATCH (none after that position, so none after pos).
  const next = new Array(INLINE_RULES.length).fill(null);
  let pos = 0;
  while (pos < source.length) {
    let best = null;
    if (depth < MAX_DEPTH) {
      for (let i = 0; i < INLINE_RULES.length; i++) {
        const rule = INLINE_RULES[i];
        if (inLink && (rule.name === "link" || rule.name === "url" || rule.name === "autolink")) continue;
        if (next[i] === null || next[i].index < pos) {
          rule.re.lastIndex = pos;
          next[i] = rule.re.exec(source) || NO_MATCH;
        }
        const m = next[i];
        if (m !== NO_MATCH && (best === null || m.index < best.m.index)) best = { rule, m };
        if (best && best.m.index === pos) break;
      }
    }
    if (!best) {
      parent.append(document.createTextNode(source.slice(pos)));
      return;
    }
    const { rule, m } = best;
    if (m.index > pos) parent.append(document.createTextNode(source.slice(pos, m.index)));
    switch (rule.name) {
      case "escape":
        parent.append(document.createTextNode(m[1]));
        break;
      case "code": {
        let code = m[2];
        if (/^ .*[^ ].* $/.test(code)) code = code.slice(1, -1);
        parent.append(el("code", null, code));
        break;
      }
      case "autolink":
      case "url": {
        const raw = rule.name === "url" ? m[0] : m[1];
        const href = safeHref(raw);
        parent.append(href ? link(href, raw) : document.createTextNode(m[0]));
        break;
      }
      case "image":
      case "link": {
        const href = safeHref(m[2]);
        const label = rule.name === "image" ? m[1] || m[2] : m[1];
        if (href) {
          const span = document.createDocumentFragment();
          renderInline(label, span, depth + 1, true);
          parent.append(link(href, span));
        } else {
          // Not an http(s) link (javascript:, data:, relative…): keep only the label.
          renderInline(label, parent, depth + 1, inLink);
        }
        break;
      }
      case "strong":
      case "strike":
      case "em": {
        const tag = rule.name === "strike" ? "del" : rule.name;
        const node = el(tag);
        renderInline(m[1] !== undefined ? m[1] : m[2], node, depth + 1, inLink);
        parent.append(node);
        break;
      }
    }
    pos = m.index + m[0].length;
  }
}

/** Inline text where single newlines become <br>. */
function renderLines(lines, parent) {
  lines.forEach((line, i) => {
    if (i > 0) parent.append(el("br"));
    renderInline(line.trimEnd(), parent);
  });
}

// ---- blocks ---------------------------------------------------------------------------

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
// The text is trimmed of closing #s in code (a lazy group before `\s*#*\s*$` is quadratic).
const HEADING = /^ {0,3}(#{1,6})\s+(.*)$/;
const RULE = /^ {0,3}((\*\s*){3,}|(-\s*){3,}|(_\s*){3,})$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const TABLE_SEP = /^\s*\|?\s*:?-{1,}:?\s*(\|\s*:?-{1,}:?\s*)*\|?\s*$/;

/** A heading's text without its optional closing run of #s (which needs a space before). */
function headingText(raw) {
  const text = raw.trimEnd();
  let end = text.length;
  while (end > 0 && text[end - 1] === "#") end--;
  if (end === text.length) return text;
  if (end === 0) return "";
  return /\s/.test(text[end - 1]) ? text.slice(0, end).trimEnd() : text;
}

function indentOf(line) {
  const m = /^[ \t]*/.exec(line)[0];
  return m.replace(/\t/g, "    ").length;
}

function splitRow(line) {
  let s = line.trim();
  if (s.startsWith("|")) s = s.slice(1);
  if (s.endsWith("|") && !s.endsWith("\\|")) s = s.slice(0, -1);
  const cells = [];
  let cur = "";
  for (let i = 0; i < s.length; i++) {
    if (s[i] === "\\" && s[i + 1] === "|") {
      cur += "|";
      i++;
    } else if (s[i] === "|") {
      cells.push(cur.trim());
      cur = "";
    } else cur += s[i];
  }
  cells.push(cur.trim());
  return cells;
}

function isBlockStart(line, next) {
  return (
    FENCE.test(line) ||
    HEADING.test(line) ||
    RULE.test(line) ||
    QUOTE.test(line) ||
    ITEM.test(line) ||
    (line.includes("|") && next !== undefined && TABLE_SEP.test(next) && next.includes("-"))
  );
}

/** Parses a list starting at lines[start]; returns [element, nextIndex]. */
/** A fenced code block opened at lines[start] (`open`: its FENCE match) → [pre, next line]. */
function parseFence(lines, start, open) {
  const fence = open[1];
  const lang = (open[2] || "").replace(/[^\w+-]/g, "");
  const body = [];
  let i = start + 1;
  while (i < lines.length && !new RegExp("^ {0,3}" + fence[0] + "{" + fence.length + ",}\\s*$").test(lines[i])) {
    body.push(lines[i]);
    i++;
  }
  i++; // closing fence (or end of input)
  const pre = el("pre");
  const code = el("code", null, body.join("\n"));
  if (lang) code.className = "language-" + lang;
  pre.append(code);
  return [pre, i];
}

/** A pipe table whose header is lines[start] (its separator the next line) → [node, next line]. */
function parseTable(lines, start) {
  const header = splitRow(lines[start]);
  const table = el("table");
  const thead = el("thead");
  const tr = el("tr");
  for (const cell of header) {
    const th = el("th");
    renderInline(cell, th);
    tr.append(th);
  }
  thead.append(tr);
  table.append(thead);
  const tbody = el("tbody");
  let i = start + 2;
  while (i < lines.length && lines[i].trim() !== "" && lines[i].includes("|")) {
    const row = el("tr");
    const cells = splitRow(lines[i]);
    for (let c = 0; c < header.length; c++) {
      const td = el("td");
      renderInline(cells[c] || "", td);
      row.append(td);
    }
    tbody.append(row);
    i++;
  }
  table.append(tbody);
  const wrap = el("div", "table-wrap");
  wrap.append(table);
  return [wrap, i];
}

function parseList(lines, start, depth) {
  const first = ITEM.exec(lines[start]);
  const baseIndent = indentOf(first[1]);
  const ordered = /\d/.test(first[2]);
  const list = el(ordered ? "ol" : "ul");
  if (ordered) {
    const n = parseInt(first[2], 10);
    if (n !== 1 && Number.isFinite(n)) list.start = n;
  }
  let i = start;
  while (i < lines.length) {
    const m = ITEM.exec(lines[i]);
    if (!m || indentOf(m[1]) !== baseIndent || /\d/.test(m[2]) !== ordered) break;
    const li = el("li");
    const textLines = [m[3]];
    i++;
    // Continuation lines and nested lists.
    while (i < lines.length) {
      const line = lines[i];
      if (line.trim() === "") {
        // A blank line ends the item unless the next line is indented content.
        if (i + 1 < lines.length && indentOf(lines[i + 1]) > baseIndent && lines[i + 1].trim() !== "") {
          i++;
          continue;
        }
        break;
      }
      const sub = ITEM.exec(line);
      if (sub && indentOf(sub[1]) > baseIndent) {
        if (textLines.length) {
          renderLines(textLines.splice(0), li);
        }
        const [nested, next] = parseList(lines, i, depth + 1);
        li.append(nested);
        i = next;
        continue;
      }
      if (sub || (indentOf(line) <= baseIndent && isBlockStart(line, lines[i + 1]))) break;
      textLines.push(line.trim());
      i++;
    }
    if (textLines.length) renderLines(textLines, li);
    list.append(li);
  }
  return [list, i];
}

function renderBlocks(text, parent, depth = 0) {
  const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (line.trim() === "") {
      i++;
      continue;
    }
    let m;
    if ((m = FENCE.exec(line))) {
      const [pre, next] = parseFence(lines, i, m);
      parent.append(pre);
      i = next;
      continue;
    }
    if ((m = HEADING.exec(line))) {
      const level = Math.min(6, m[1].length + 2);
      const h = el("h" + level);
      renderInline(headingText(m[2]), h);
      parent.append(h);
      i++;
      continue;
    }
    if (RULE.test(line)) {
      parent.append(el("hr"));
      i++;
      continue;
    }
    if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
        body.push(m[1]);
        i++;
      }
      const q = el("blockquote");
      if (depth < MAX_DEPTH) renderBlocks(body.join("\n"), q, depth + 1);
      else renderLines(body, q);
      parent.append(q);
      continue;
    }
    if (ITEM.test(line)) {
      const [list, next] = parseList(lines, i, depth);
      parent.append(list);
      i = next;
      continue;
    }
    if (line.includes("|") && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1]) && lines[i + 1].includes("-")) {
      const [table, next] = parseTable(lines, i);
      parent.append(table);
      i = next;
      continue;
    }
    // Paragraph: up to a blank line or the start of another block.
    const para = [line];
    i++;
    while (i < lines.length && lines[i].trim() !== "" && !isBlockStart(lines[i], lines[i + 1])) {
      para.push(lines[i]);
      i++;
    }
    const p = el("p");
    renderLines(para, p);
    parent.append(p);
  }
}

/** Renders markdown to a DocumentFragment (safe: no HTML is ever interpreted). */
export function renderMarkdown(text) {
  const frag = document.createDocumentFragment();
  let input = String(text == null ? "" : text);
  if (input.length > MAX_INPUT) input = input.slice(0, MAX_INPUT) + "\n\n…(truncated)";
  renderBlocks(input, frag);
  return frag;
}
