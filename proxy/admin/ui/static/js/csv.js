// CSV export of table rows, written in the browser (RFC 4180 quoting; cells that a spreadsheet
// would run as a formula — starting with = + - @ — are prefixed with an apostrophe).

function cell(value) {
  if (value === null || value === undefined) return "";
  let text = String(value);
  if (typeof value === "string" && /^[=+\-@\t\r]/.test(text)) text = `'${text}`;
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/** The CSV text of `rows` (objects) with `columns` as the header and field order. */
export function toCsv(columns, rows) {
  return [columns, ...rows.map((row) => columns.map((name) => row[name]))]
    .map((line) => line.map(cell).join(",")).join("\r\n") + "\r\n";
}

/** Offer `text` as a download named `filename`. */
export function download(filename, text) {
  const url = URL.createObjectURL(new Blob([text], { type: "text/csv;charset=utf-8" }));
  const link = document.createElement("a");
  link.href = url;
  link.download = filename;
  document.body.append(link);
  link.click();
  link.remove();
  window.setTimeout(() => URL.revokeObjectURL(url), 10000);
}
