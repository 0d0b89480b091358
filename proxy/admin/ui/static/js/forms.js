// Dialogs and the parsing of what an operator types into them.

import { el } from "./dom.js";

/**
 * A modal <dialog> titled `title` holding `body` (nodes) and buttons; resolves with the value
 * of the button pressed (`cancel` for Escape). `onSubmit(value)` may return false (or throw)
 * to keep the dialog open, e.g. to show an error beside the fields.
 */
export function modal(title, body, buttons, onSubmit = async () => true) {
  return new Promise((resolve) => {
    const titleId = `dialog-${Math.random().toString(36).slice(2)}`;
    const error = el("p", { class: "error", role: "alert", hidden: true });
    const form = el("form", { method: "dialog" }, body, error,
      el("div", { class: "buttons" }, buttons.map(([value, label, kind]) =>
        el("button", { type: "submit", value, class: kind || null, text: label }))));
    const dialog = el("dialog", { "aria-labelledby": titleId }, el("h2", { id: titleId, text: title }), form);
    let settled = false;
    const finish = (value) => {
      if (settled) return;
      settled = true;
      dialog.close();
      dialog.remove();
      resolve(value);
    };
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const value = event.submitter ? event.submitter.value : "ok";
      if (value === "cancel") return finish(value);
      error.hidden = true;
      try {
        if ((await onSubmit(value)) === false) return undefined;
      } catch (failure) {
        error.textContent = failure.param ? `${failure.param}: ${failure.message}` : failure.message;
        error.hidden = false;
        return undefined;
      }
      return finish(value);
    });
    dialog.addEventListener("cancel", () => finish("cancel"));
    document.body.append(dialog);
    dialog.showModal();
  });
}

/** Ask before doing something that cannot be undone; resolves true when confirmed. */
export async function confirmAction(title, message, action) {
  const answer = await modal(title, [el("p", { text: message })], [["cancel", "Cancel", "quiet"], ["confirm", action, "danger"]]);
  return answer === "confirm";
}

/** "a, b" → ["a", "b"]; "" → null (every model). */
export function list(text) {
  const items = text.split(",").map((item) => item.trim()).filter(Boolean);
  return items.length ? items : null;
}

/** "" → null (unlimited); else a positive integer, or an error naming `name`. */
export function positive(text, name) {
  if (text.trim() === "") return null;
  const value = Number(text);
  if (!Number.isInteger(value) || value < 1) throw Object.assign(new Error("expected a whole number of at least 1"), { param: name });
  return value;
}

/** A budget from its two fields: null when the amount is empty. */
export function budgetOf(amount, period) {
  if (amount.trim() === "") return null;
  const value = Number(amount);
  if (!(value > 0)) throw Object.assign(new Error("expected an amount above 0"), { param: "budget" });
  return { max_usd: value, period };
}

export const PERIODS = [["1d", "per day"], ["7d", "per 7 days"], ["30d", "per 30 days"], ["1mo", "per month"], ["lifetime", "lifetime"]];

/** Copy `text` to the clipboard (the input's selection when the Clipboard API is refused). */
export async function copy(text, input) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    input.select();
    return document.execCommand("copy");
  }
}
