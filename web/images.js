// Images for the composer: a pasted, dropped or picked file becomes an image content block
// (`{type: 'image', source: {type: 'base64', media_type, data}}`), scaled down in a canvas
// when it is too large to send in one frame.

/** The image types a turn may carry. */
export const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp'];

/** The longest side an image is sent at (larger ones gain nothing and cost more). */
const MAX_SIDE = 1568;

/**
 * @typedef {{type: 'image', source: {type: 'base64', media_type: string, data: string}}} ImageBlock
 */

/**
 * The base64 of a blob's bytes.
 * @param {Blob} blob
 * @returns {Promise<string>}
 */
async function base64(blob) {
  const url = await new Promise((done, fail) => {
    const reader = new FileReader();
    reader.onload = () => done(/** @type {string} */ (reader.result));
    reader.onerror = () => fail(reader.error ?? new Error('the file could not be read'));
    reader.readAsDataURL(blob);
  });
  return url.slice(url.indexOf(',') + 1);
}

/**
 * An image block for `file`, at most `budget` characters of base64: sent as it is when it is
 * of an accepted type, small enough and no larger than {@link MAX_SIDE}; otherwise redrawn
 * smaller as a JPEG until it fits.
 * @param {File} file
 * @param {number} budget
 * @returns {Promise<ImageBlock>}
 */
export async function imageBlock(file, budget) {
  if (!file.type.startsWith('image/')) throw new Error(`${file.name || 'the file'} is not an image`);
  const bitmap = await createImageBitmap(file).catch(() => {
    throw new Error(`${file.name || 'the image'} could not be read as an image`);
  });
  try {
    const longest = Math.max(bitmap.width, bitmap.height);
    if (IMAGE_TYPES.includes(file.type) && longest <= MAX_SIDE) {
      const data = await base64(file);
      if (data.length <= budget) return block(file.type, data);
    }
    let scale = Math.min(1, MAX_SIDE / longest);
    for (let attempt = 0; attempt < 8; attempt += 1) {
      const canvas = document.createElement('canvas');
      canvas.width = Math.max(1, Math.round(bitmap.width * scale));
      canvas.height = Math.max(1, Math.round(bitmap.height * scale));
      const context = /** @type {CanvasRenderingContext2D} */ (canvas.getContext('2d'));
      // JPEG has no transparency: what was transparent becomes white, not black.
      context.fillStyle = '#fff';
      context.fillRect(0, 0, canvas.width, canvas.height);
      context.drawImage(bitmap, 0, 0, canvas.width, canvas.height);
      const jpeg = await new Promise((done) => canvas.toBlob(done, 'image/jpeg', 0.85));
      if (jpeg) {
        const data = await base64(jpeg);
        if (data.length <= budget) return block('image/jpeg', data);
      }
      scale *= 0.7;
    }
    throw new Error(`${file.name || 'the image'} is too large to send`);
  } finally {
    bitmap.close();
  }
}

/**
 * @param {string} mediaType
 * @param {string} data
 * @returns {ImageBlock}
 */
function block(mediaType, data) {
  return { type: 'image', source: { type: 'base64', media_type: mediaType, data } };
}

/**
 * A `data:` URL showing an image block.
 * @param {ImageBlock} image
 */
export function imageUrl(image) {
  return `data:${image.source.media_type};base64,${image.source.data}`;
}
