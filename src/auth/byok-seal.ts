import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

/**
 * Sealing of workspace provider keys (BYOK) at rest: AES-256-GCM under `byok.encryption_key`, a fresh random
 * 12-byte IV per seal, the 16-byte auth tag kept with the ciphertext. The stored text is versioned
 * (`v1:<iv>:<tag>:<ciphertext>`, base64 parts) so the scheme can change without guessing at old rows.
 *
 * `context` (the workspace id and provider id) is bound as additional authenticated data: a sealed key copied
 * into another workspace's or provider's row does not open there.
 *
 * @example const sealed = sealProviderKey('sk-live-…', parseEncryptionKey(config.byok.encryption_key!), byokContext(ws.id, 'openai'));
 *          openProviderKey(sealed, key, byokContext(ws.id, 'openai')); // 'sk-live-…'
 */

const VERSION = 'v1';
const IV_BYTES = 12;
const TAG_BYTES = 16;
const KEY_BYTES = 32;
const HEX_KEY = /^[0-9a-fA-F]{64}$/;
const BASE64 = /^[A-Za-z0-9+/_-]+={0,2}$/;

/** A malformed encryption key, or a sealed key that does not open (wrong key, tampered, another row's). */
export class ByokSealError extends Error {
  override name = 'ByokSealError';
}

/**
 * The 32-byte key from its configured text: 64 hex characters, or base64 (standard or URL-safe) of 32 bytes
 * (e.g. `openssl rand -base64 32`). The error never repeats the text.
 */
export function parseEncryptionKey(text: string): Buffer {
  const t = text.trim();
  if (HEX_KEY.test(t)) return Buffer.from(t, 'hex');
  // Node's base64 decoder also takes the URL-safe alphabet.
  const bytes = BASE64.test(t) ? Buffer.from(t, 'base64') : null;
  if (bytes?.length === KEY_BYTES) return bytes;
  const got = bytes ? `${bytes.length} bytes of base64` : `${t.length} characters that are neither hex nor base64`;
  throw new ByokSealError(`must be ${KEY_BYTES} bytes as 64 hex characters or base64 (e.g. \`openssl rand -base64 32\`); got ${got}`);
}

/** The additional authenticated data of one stored key. */
export function byokContext(workspaceId: string, provider: string): string {
  return `byok:${workspaceId}:${provider}`;
}

export function sealProviderKey(plaintext: string, key: Buffer, context: string): string {
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key, iv, { authTagLength: TAG_BYTES });
  cipher.setAAD(Buffer.from(context, 'utf8'));
  const ciphertext = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return [VERSION, iv.toString('base64'), cipher.getAuthTag().toString('base64'), ciphertext.toString('base64')].join(':');
}

/** The plaintext of a sealed key; throws ByokSealError when it does not open. */
export function openProviderKey(sealed: string, key: Buffer, context: string): string {
  const parts = sealed.split(':');
  if (parts.length !== 4 || parts[0] !== VERSION) throw new ByokSealError('not a sealed provider key (expected v1:<iv>:<tag>:<ciphertext>)');
  const [iv, tag, ciphertext] = parts.slice(1).map((p) => Buffer.from(p, 'base64'));
  if (iv.length !== IV_BYTES || tag.length !== TAG_BYTES) throw new ByokSealError('sealed provider key has a bad IV or tag length');
  try {
    const decipher = createDecipheriv('aes-256-gcm', key, iv, { authTagLength: TAG_BYTES });
    decipher.setAAD(Buffer.from(context, 'utf8'));
    decipher.setAuthTag(tag);
    return Buffer.concat([decipher.update(ciphertext), decipher.final()]).toString('utf8');
  } catch {
    // GCM authentication failed: wrong encryption key, altered ciphertext, or a row moved to another workspace.
    throw new ByokSealError('sealed provider key does not open with this encryption key');
  }
}

/**
 * The display label of a provider key: its first 3 and last 4 characters (`sk-...abcd`). Keys shorter than
 * 16 characters show nothing, since 7 known characters would be too large a part of them.
 */
export function maskProviderKey(key: string): string {
  return key.length >= 16 ? `${key.slice(0, 3)}...${key.slice(-4)}` : '...';
}
