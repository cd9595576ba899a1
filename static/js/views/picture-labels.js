// What a person reads of a picture's positions: which are drawn on it, how the others are
// named (a row's newlines together, the padding, the thumbnail, the text), and the
// readout of a query's row.

export function labelOf(position) {
  return position.label;
}

// whether a position is drawn on the picture: a patch (a thumbnail's token covers what
// the tiles' cover, read again small: counted beside them, not drawn over them, unless
// no tile's token is kept, as of a banner LLaVA-NeXT reads by its base alone; a
// resampler's learned query reads the whole picture: it has no box)
export function drawn(position, image) {
  image.tiled ??= image.positions.some((p) => p.kind === "patch" && p.box);
  return Boolean(position.box) && (position.kind !== "thumbnail" || !image.tiled);
}

// how many of the picture's tokens are a resampler's learned queries
export function queriesOf(image) {
  return image.positions.filter((p) => p.kind === "query").length;
}

// the positions that are no patch nor a resampler's query, named once each: a kind of
// many (a row's newlines, "↵ 0" … "↵ 23") by its mark and how many, a letterbox's
// padding, a thumbnail's tokens and the text's together
export function namesOf(t, image) {
  const counts = new Map();
  for (const p of image.positions) {
    if (drawn(p, image) || ["text", "thumbnail", "query"].includes(p.kind)) continue;
    // (its mark: "↵ 3" → "↵", "░ 0,3" → "░", "[DET 7]" → "[DET]")
    const mark = p.label.replace(/\s*[\d,]+(\]?)$/, "$1");
    counts.set(mark, [...(counts.get(mark) ?? []), p.label]);
  }
  const named = [];
  for (const [mark, labels] of counts) {
    // (a letterbox's tokens wholly outside the picture, DeepSeek-VL's "░ 0,3"; a padded
    // sequence's, SigLIP 2's "░ 0")
    if (mark === "░") named.push(t("picture_padding").replace("{n}", labels.length));
    else if (labels.length > 4) named.push(`${mark} ×${labels.length}`);
    else named.push(...labels);
  }
  const kinds = new Set(image.positions.map((p) => p.kind));
  if (kinds.has("thumbnail") && image.tiled) named.push(t("picture_thumbnail"));
  if (kinds.has("text")) named.push(t("picture_text"));
  return named;
}

// what a person reads of the row: the query, its strongest patch, the share of its
// attention that goes to a resampler's learned queries (which read the whole picture),
// and the share that goes to positions that are no patch (not drawn on the picture),
// `named` as namesOf names them
export function said(t, image, row, q, named) {
  let best = -1;
  let elsewhere = 0;
  let queried = 0;
  image.positions.forEach((p, j) => {
    if (p.kind === "query") queried += row[j];
    else if (!drawn(p, image)) elsewhere += row[j];
    else if (best < 0 || row[j] > row[best]) best = j;
  });
  const queries = queriesOf(image);
  const parts = [
    t("picture_query").replace("{q}", labelOf(image.positions[q])),
    best >= 0
      ? t("picture_strongest")
          .replace("{p}", labelOf(image.positions[best]))
          .replace("{w}", row[best].toFixed(2))
      : "",
    queries
      ? t("picture_to_queries")
          .replace("{share}", (100 * queried).toFixed(1))
          .replace("{n}", queries)
      : "",
    named.length
      ? t("picture_elsewhere")
          .replace("{share}", (100 * elsewhere).toFixed(1))
          .replace("{names}", named.join(", "))
      : "",
  ];
  return parts.filter(Boolean).join(" · ");
}
