// A data table: a caption, column headers, one row per item, an empty-state row, wrapped in a
// scrollable region so that wide tables work on phones.
import { h, append } from "../dom";

export interface Column<T> {
  label: string;
  cell: (row: T) => Node | string | number | (Node | string)[];
  /** CSS class of the header and the cells ("num" right-aligns). */
  className?: string;
}

export interface TableOptions<T> {
  caption: string;
  /** Shown in one row when there are no items. */
  empty: string;
  /** Visually hide the caption (it is still read by screen readers). */
  hideCaption?: boolean;
  rowKey?: (row: T) => string;
  /** More classes of the <table> (a page's own column widths or density). */
  className?: string;
}

export function dataTable<T>(columns: Column<T>[], rows: T[], options: TableOptions<T>): HTMLElement {
  const caption = h("caption", { class: options.hideCaption ? "visually-hidden" : undefined }, options.caption);
  const head = h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col", class: c.className }, c.label))));
  const body = h("tbody");
  if (rows.length === 0) {
    body.append(h("tr", {}, h("td", { colspan: columns.length, class: "empty" }, options.empty)));
  }
  for (const row of rows) {
    const tr = h("tr", { "data-key": options.rowKey?.(row) });
    for (const column of columns) {
      const td = h("td", { class: column.className });
      const value = column.cell(row);
      append(td, ...(Array.isArray(value) ? value : [value]));
      tr.append(td);
    }
    body.append(tr);
  }
  const table = h("table", { class: options.className ? `data ${options.className}` : "data" }, caption, head, body);
  return h("div", { class: "table-scroll", role: "region", "aria-label": options.caption, tabindex: "0" }, table);
}
