// Buckets: the project's buckets (create, delete an empty one), then one bucket's "folders" and
// objects under a prefix, with upload (progress per file), download and delete — all on presigned
// S3 URLs.
import { canWrite, messageOf, whoami } from "../api";
import { dataTable } from "../components/table";
import { errorNotice, StatusLine } from "../components/notice";
import { h, replace, uid } from "../dom";
import { bytes, dateTime } from "../format";
import { registerPage } from "../router";
import { createBucket, deleteBucket, deleteObject, downloadUrl, listBuckets, listObjects, upload, type Listing, type S3Object } from "../s3";

/** S3's bucket name rule (3..63 of a-z 0-9 . -, starting and ending with a letter or digit). */
const BUCKET_NAME = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

function bucketHref(bucket: string, prefix = ""): string {
  return `/buckets/${encodeURIComponent(bucket)}${prefix ? `?prefix=${encodeURIComponent(prefix)}` : ""}`;
}

registerPage({
  path: "/buckets",
  title: "Buckets",
  nav: { label: "Buckets", order: 10 },
  async render(ctx) {
    const me = await whoami();
    const writable = canWrite(me);
    const status = new StatusLine();
    const holder = h("div", { "aria-busy": "true" }, "Loading buckets…");
    const load = async () => {
      holder.setAttribute("aria-busy", "true");
      try {
        const buckets = await listBuckets(ctx.signal);
        replace(
          holder,
          dataTable(
            [
              { label: "Bucket", cell: (b) => h("a", { href: bucketHref(b.name) }, b.name) },
              { label: "Created", cell: (b) => (b.created ? dateTime(b.created) : "") },
              ...(writable
                ? [{ label: "Actions", cell: (b: { name: string }) => h("button", { type: "button", class: "link danger", "aria-label": `Delete bucket ${b.name}`, onclick: () => void remove(b.name) }, "Delete") }]
                : []),
            ],
            buckets,
            {
              caption: "Buckets of this project",
              empty: "This project has no bucket yet.",
              rowKey: (b) => b.name,
            },
          ),
        );
      } catch (error) {
        replace(holder, errorNotice(error, "The buckets cannot be listed"));
      }
      holder.removeAttribute("aria-busy");
    };
    const remove = async (name: string) => {
      if (!confirm(`Delete the bucket ${name}? Only an empty bucket can be deleted.`)) return;
      try {
        await deleteBucket(name);
        status.show(`Deleted the bucket ${name}.`, "ok");
        await load();
      } catch (error) {
        status.error(error, `The bucket ${name} cannot be deleted`);
      }
    };
    ctx.root.append(status.el);
    if (writable) ctx.root.append(createForm(status, load));
    ctx.root.append(holder);
    await load();
  },
});

registerPage({
  path: "/buckets/:bucket",
  title: "Bucket",
  async render(ctx) {
    const bucket = ctx.params.bucket;
    const prefix = ctx.query.get("prefix") ?? "";
    ctx.setTitle(`Bucket ${bucket}`);
    const me = await whoami();
    const status = new StatusLine();
    const listingEl = h("div", { "aria-live": "polite" });
    let listing: Listing = { prefixes: [], objects: [], nextToken: null };

    const crumbs = h("nav", { class: "crumbs", "aria-label": "Location" });
    const parts = prefix.split("/").filter(Boolean);
    const trail: (Node | string)[] = [h("a", { href: "/buckets" }, "Buckets"), " / ", h("a", { href: bucketHref(bucket) }, bucket)];
    parts.forEach((part, i) => {
      const p = parts.slice(0, i + 1).join("/") + "/";
      trail.push(" / ", i === parts.length - 1 ? h("span", { "aria-current": "page" }, part) : h("a", { href: bucketHref(bucket, p) }, part));
    });
    crumbs.append(...trail);
    ctx.root.append(crumbs, status.el);

    const load = async (more: boolean) => {
      listingEl.setAttribute("aria-busy", "true");
      try {
        const page = await listObjects(bucket, prefix, more ? listing.nextToken : null, ctx.signal);
        listing = more
          ? { prefixes: [...listing.prefixes, ...page.prefixes], objects: [...listing.objects, ...page.objects], nextToken: page.nextToken }
          : page;
        draw();
      } catch (error) {
        replace(listingEl, errorNotice(error, `The bucket ${bucket} cannot be listed`));
      } finally {
        listingEl.removeAttribute("aria-busy");
      }
    };

    const download = async (o: S3Object) => {
      try {
        const a = h("a", { href: await downloadUrl(bucket, o.key), download: "" });
        document.body.append(a);
        a.click();
        a.remove();
      } catch (error) {
        status.error(error, `${o.key} cannot be downloaded`);
      }
    };

    const remove = async (o: S3Object) => {
      if (!confirm(`Delete ${o.key} from ${bucket}? This cannot be undone unless the bucket keeps versions.`)) return;
      try {
        await deleteObject(bucket, o.key);
        status.show(`Deleted ${o.key}.`, "ok");
        await load(false);
      } catch (error) {
        status.error(error, `${o.key} cannot be deleted`);
      }
    };

    type Row = { kind: "prefix"; prefix: string } | { kind: "object"; object: S3Object };
    const draw = () => {
      const rows: Row[] = [
        ...listing.prefixes.map((p): Row => ({ kind: "prefix", prefix: p })),
        ...listing.objects.filter((o) => o.key !== prefix).map((o): Row => ({ kind: "object", object: o })),
      ];
      const name = (full: string) => full.slice(prefix.length) || full;
      const table = dataTable<Row>(
        [
          {
            label: "Name",
            cell: (r) => (r.kind === "prefix" ? h("a", { href: bucketHref(bucket, r.prefix), class: "folder" }, name(r.prefix)) : name(r.object.key)),
          },
          { label: "Size", className: "num", cell: (r) => (r.kind === "object" ? bytes(r.object.size) : "") },
          { label: "Modified", cell: (r) => (r.kind === "object" && r.object.modified ? dateTime(r.object.modified) : "") },
          {
            label: "Actions",
            cell: (r) => {
              if (r.kind === "prefix") return "";
              const o = r.object;
              const label = name(o.key);
              return [
                h("button", { type: "button", class: "link", "aria-label": `Download ${label}`, onclick: () => void download(o) }, "Download"),
                canWrite(me) ? h("button", { type: "button", class: "link danger", "aria-label": `Delete ${label}`, onclick: () => void remove(o) }, "Delete") : "",
              ];
            },
          },
        ],
        rows,
        {
          caption: prefix ? `Contents of ${prefix}` : `Contents of ${bucket}`,
          empty: "Nothing here yet.",
          rowKey: (r) => (r.kind === "prefix" ? r.prefix : r.object.key),
        },
      );
      replace(listingEl, table);
      if (listing.nextToken) {
        listingEl.append(h("button", { type: "button", onclick: () => void load(true) }, "Load more"));
      }
    };

    if (canWrite(me)) ctx.root.append(uploadForm(bucket, prefix, () => load(false), ctx.signal));
    ctx.root.append(listingEl);
    await load(false);
  },
});

function uploadForm(bucket: string, prefix: string, done: () => Promise<void>, signal: AbortSignal): HTMLElement {
  const fileId = uid("upload");
  const files = h("input", { type: "file", id: fileId, multiple: true, "aria-describedby": `${fileId}-help` });
  const button = h("button", { type: "submit", class: "primary" }, "Upload");
  const progress = h("ul", { class: "uploads", "aria-label": "Uploads" });
  const status = new StatusLine();
  const form = h(
    "form",
    { class: "card upload" },
    h("h2", {}, "Upload"),
    h("div", { class: "field" }, h("label", { for: fileId }, "Files"), files, h("p", { class: "help", id: `${fileId}-help` }, `Stored as ${bucket}/${prefix}<file name>, directly into the object store.`)),
    button,
    progress,
    status.el,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const chosen = Array.from(files.files ?? []);
    if (chosen.length === 0) {
      status.show("Choose one or more files first.", "error");
      files.focus();
      return;
    }
    button.disabled = true;
    status.clear();
    progress.replaceChildren();
    let failed = 0;
    for (const file of chosen) {
      const bar = h("progress", { max: 1, value: 0, "aria-label": `Upload of ${file.name}` });
      const text = h("span", { class: "pct" }, "0 %");
      progress.append(h("li", {}, h("span", { class: "name" }, file.name), bar, text));
      try {
        await upload(
          bucket,
          prefix + file.name,
          file,
          (f) => {
            bar.value = f;
            text.textContent = `${Math.round(f * 100)} %`;
          },
          signal,
        );
        text.textContent = "done";
      } catch (error) {
        failed += 1;
        text.textContent = `failed: ${messageOf(error)}`;
        text.classList.add("error");
      }
    }
    button.disabled = false;
    files.value = "";
    status.show(failed ? `${failed} of ${chosen.length} uploads failed.` : `Uploaded ${chosen.length} file${chosen.length === 1 ? "" : "s"}.`, failed ? "error" : "ok");
    await done();
  });
  return form;
}

function createForm(status: StatusLine, done: () => Promise<void>): HTMLElement {
  const id = uid("bucket-name");
  const name = h("input", { type: "text", id, required: true, maxlength: 63, autocomplete: "off", spellcheck: "false", "aria-describedby": `${id}-help ${id}-error` });
  const error = h("p", { class: "field-error", id: `${id}-error`, hidden: true });
  const button = h("button", { type: "submit", class: "primary" }, "Create bucket");
  const form = h(
    "form",
    { class: "card create-bucket", novalidate: true },
    h("div", { class: "field" },
      h("label", { for: id }, "New bucket name"),
      h("div", { class: "copy-row" }, name, button),
      h("p", { class: "help", id: `${id}-help` }, "3 to 63 characters: lowercase letters, digits, '-' and '.'. Buckets belong to the project."),
      error),
  );
  const setError = (text: string) => {
    error.textContent = text;
    error.hidden = !text;
    if (text) name.setAttribute("aria-invalid", "true");
    else name.removeAttribute("aria-invalid");
  };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const value = name.value.trim();
    setError("");
    if (!BUCKET_NAME.test(value) || value.includes("..")) {
      setError("Use 3 to 63 lowercase letters, digits, '-' or '.', starting and ending with a letter or digit.");
      name.focus();
      return;
    }
    button.disabled = true;
    try {
      await createBucket(value);
      status.show(`Created the bucket ${value}.`, "ok");
      name.value = "";
      await done();
    } catch (e) {
      setError(messageOf(e));
      name.focus();
    } finally {
      button.disabled = false;
    }
  });
  return form;
}
