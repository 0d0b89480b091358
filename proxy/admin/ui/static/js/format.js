// How numbers, money, times and limits read on the page.

const usd = new Intl.NumberFormat("en-US", { style: "currency", currency: "USD", maximumFractionDigits: 6 });
const usdShort = new Intl.NumberFormat("en-US", { style: "currency", currency: "USD", maximumFractionDigits: 2 });
const count = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
const decimal = new Intl.NumberFormat("en-US", { maximumFractionDigits: 2 });

export const money = (value) => (value === null || value === undefined ? "unknown" : usd.format(value));
export const moneyShort = (value) => (value === null || value === undefined ? "—" : (Math.abs(value) < 0.01 && value !== 0 ? usd.format(value) : usdShort.format(value)));
export const integer = (value) => (value === null || value === undefined ? "—" : count.format(value));
export const number = (value) => (value === null || value === undefined ? "—" : decimal.format(value));
export const percent = (value) => (value === null || value === undefined ? "—" : `${decimal.format(value * 100)} %`);
export const ms = (value) => (value === null || value === undefined ? "—" : `${decimal.format(value)} ms`);

/** An RFC 3339 time as the reader's local date and time (the ISO text when unparsable). */
export function when(value) {
  if (!value) return "never";
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? String(value) : date.toLocaleString();
}

/** A key's or team's rate limits as "60 rpm · 10k tpm · 4 parallel" ("unlimited" when none). */
export function limits(record) {
  const parts = [];
  if (record.rpm) parts.push(`${integer(record.rpm)} rpm`);
  if (record.tpm) parts.push(`${integer(record.tpm)} tpm`);
  if (record.max_parallel) parts.push(`${integer(record.max_parallel)} parallel`);
  return parts.length ? parts.join(" · ") : "unlimited";
}

export const models = (list) => (list === null || list === undefined ? "all models" : list.length ? list.join(", ") : "none");
export const budget = (b) => (b ? `${moneyShort(b.max_usd)} / ${b.period}` : "none");

/** Today as YYYY-MM-DD (UTC), and `days` before it. */
export function utcDay(offsetDays = 0) {
  const date = new Date(Date.now() + offsetDays * 86400000);
  return date.toISOString().slice(0, 10);
}
