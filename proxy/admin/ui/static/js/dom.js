// Building the page without HTML strings: every text goes in as a text node, so whatever a key
// alias or a model name holds is shown as text and never parsed as markup.

/**
 * An element `tag` with `props` and `children`.
 * props: `class`, `text`, `on` ({event: handler}), `dataset`, and any other attribute
 * (`for`, `aria-label`, `type` ...; `true` sets an empty attribute, false/null/undefined none).
 * children: nodes, strings (as text), null/undefined/false (skipped) or arrays of these.
 */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = String(value);
    else if (name === "on") for (const [event, handler] of Object.entries(value)) node.addEventListener(event, handler);
    else if (name === "dataset") Object.assign(node.dataset, value);
    else if (name === "value") node.value = value;
    else if (name === "checked") node.checked = Boolean(value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

/** Append `children` (see `el`) to `node`. */
export function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Replace everything in `node` with `children`. */
export function replace(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

/** A labelled form field: returns {wrap, input}. `options` makes a <select>. */
export function field(id, label, { type = "text", value = "", options = null, hint = null, ...attrs } = {}) {
  const input = options
    ? el("select", { id, name: id, ...attrs }, options.map(([v, text]) => el("option", { value: v, text, selected: v === value })))
    : el("input", { id, name: id, type, value, ...attrs });
  const hintId = hint ? `${id}-hint` : null;
  if (hintId) input.setAttribute("aria-describedby", hintId);
  const wrap = el("div", { class: "field" }, el("label", { for: id, text: label }), input,
    hint && el("span", { class: "hint", id: hintId, text: hint }));
  return { wrap, input };
}

/** A table with a caption and `columns` ([{label, num}]) whose body is returned for filling. */
export function table(caption, columns, id = null) {
  const body = el("tbody");
  const node = el("div", { class: "table-wrap", id },
    el("table", {},
      el("caption", { text: caption }),
      el("thead", {}, el("tr", {}, columns.map((c) => el("th", { scope: "col", class: c.num ? "num" : null, text: c.label })))),
      body));
  return { node, body };
}

/** Say `message` to screen readers (the polite live region). */
export function announce(message) {
  const status = document.getElementById("status");
  status.textContent = "";
  status.textContent = message;
}
