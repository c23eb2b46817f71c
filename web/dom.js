// Element builders shared by every module that makes DOM nodes (markdown.js included).
// Text only ever goes in through textContent, so nothing built here interprets HTML.

export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

export function button(label, className, onClick, ariaLabel) {
  const b = el("button", className ? `btn ${className}` : "btn", label);
  b.type = "button";
  if (ariaLabel) b.setAttribute("aria-label", ariaLabel);
  if (onClick) b.addEventListener("click", onClick);
  return b;
}

// Simple stroked icons (drawn here, no icon font or image request).
const ICONS = {
  pencil: ["M4 20l1.2-4.8L15.5 4.9a1.6 1.6 0 0 1 2.3 0l1.3 1.3a1.6 1.6 0 0 1 0 2.3L8.8 18.8z", "M13.5 7l3.5 3.5"],
  trash: ["M4 7h16", "M9.5 7V4.5h5V7", "M6.5 7l1 13h9l1-13", "M10 11v5.5", "M14 11v5.5"],
};
export function icon(name) {
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("width", "16");
  svg.setAttribute("height", "16");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("focusable", "false");
  svg.setAttribute("class", "icon-svg");
  for (const d of ICONS[name]) {
    const path = document.createElementNS(NS, "path");
    path.setAttribute("d", d);
    svg.append(path);
  }
  return svg;
}
