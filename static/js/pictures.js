// A picture for a model that reads pictures: chosen with the file picker, dropped on the
// page, pasted, or one of the samples the project ships; sent once (POST /api/v1/images),
// its digest then in the URL (`img`), the picture itself kept by this page to send again
// where the server no longer holds it (main.js).
import { api } from "./api.js";
import { showError } from "./output.js";
import { elements, page, readsPictures, setStatus, t } from "./page.js";

const TYPES = ["image/png", "image/jpeg", "image/webp"];
// pictures the project makes itself (harness/samples.py), its own licence
export const SAMPLES = [
  { file: "street.png", label: "sample_street" },
  { file: "shapes.png", label: "sample_shapes" },
];

// send a picture, then show the model's reading of it
export async function choosePicture(file, name = file.name) {
  if (!TYPES.includes(file.type)) {
    setStatus(t("picture_type").replace("{type}", file.type || "?"), "error");
    return;
  }
  setStatus(t("picture_sending"), "busy");
  try {
    const stored = await api.uploadImage(file);
    page.pictures.set(stored.digest, file);
    elements.pictureName.textContent = `${name || t("picture_pasted")} · ${stored.width} × ${stored.height}`;
    await page.update({ img: stored.digest });
  } catch (err) {
    showError(err);
  }
}

// a held picture's object URL, fetched once a digest (the page's views draw it)
const sources = new Map();
export function pictureSource(digest) {
  if (!sources.has(digest)) {
    const made = api.imageBlob(digest).then((blob) => URL.createObjectURL(blob));
    sources.set(digest, made);
    made.catch(() => sources.delete(digest));
  }
  return sources.get(digest);
}

// the samples as buttons (the examples' row of a model of pictures)
export function sampleButtons() {
  return SAMPLES.map(({ file, label }) => {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "sample";
    button.dataset.i18n = label;
    button.textContent = t(label);
    button.addEventListener("click", async () => {
      try {
        const blob = await (await fetch(`/static/samples/${file}`)).blob();
        await choosePicture(new File([blob], file, { type: "image/png" }), t(label));
      } catch (err) {
        showError(err);
      }
    });
    return button;
  });
}

// the first picture of a drop or a paste, if any
function pictureOf(transfer) {
  return [...(transfer?.files ?? [])].find((file) => file.type.startsWith("image/")) ?? null;
}

export function bindPictures() {
  elements.picture.addEventListener("change", () => {
    const file = elements.picture.files?.[0];
    if (file) choosePicture(file);
    elements.picture.value = ""; // (the same file chosen again is a change)
  });
  // a picture dropped anywhere on the page, or pasted, while a model of pictures is shown
  document.addEventListener("dragover", (event) => {
    if (!readsPictures() || !event.dataTransfer?.types.includes("Files")) return;
    event.preventDefault();
    event.dataTransfer.dropEffect = "copy";
    document.body.classList.add("dropping");
  });
  document.addEventListener("dragleave", (event) => {
    if (event.relatedTarget === null) document.body.classList.remove("dropping");
  });
  document.addEventListener("drop", (event) => {
    document.body.classList.remove("dropping");
    if (!readsPictures()) return;
    event.preventDefault();
    const file = pictureOf(event.dataTransfer);
    if (file) choosePicture(file);
    else setStatus(t("picture_none_dropped"), "error");
  });
  document.addEventListener("paste", (event) => {
    const file = readsPictures() ? pictureOf(event.clipboardData) : null;
    if (!file) return; // (text pasted into a box stays the box's)
    event.preventDefault();
    choosePicture(file, t("picture_pasted"));
  });
}
