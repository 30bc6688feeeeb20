/**
 * Defence in depth: whatever a presenter forgot, no response carries a lease id, a host
 * credential, a key, a signature or a hash of any of them. Used as express's JSON replacer and for
 * server-sent event data.
 */
const SECRET_KEY =
  /(lease_?id|secret|credential|token|hash|password|private_?key|api_?key|^keys$|^hostkeys$|^sig$|signature|^box$)/i;

export const isSecretKey = (key: string): boolean => SECRET_KEY.test(key);

export function redactingReplacer(this: unknown, key: string, value: unknown): unknown {
  return key !== '' && isSecretKey(key) ? undefined : value;
}

export const safeStringify = (value: unknown): string => JSON.stringify(value, redactingReplacer);
