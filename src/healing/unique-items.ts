import type Ajv from 'ajv';
import type { SchemaValidateFunction } from 'ajv';

/**
 * Replaces ajv's `uniqueItems` with one linear in the array. ajv compares every pair of items with a deep
 * equality unless the schema declares the items a scalar type: 20 000 objects took 7.4 s of the event loop,
 * and the array is the model's answer to a schema the client wrote. Here each item gets a structural id
 * (`JsonIds`), and a duplicate is an id seen twice. The error keeps ajv's keyword, params and message.
 *
 * @example const ajv = linearUniqueItems(new Ajv()); ajv.validate({uniqueItems: true}, [{a: 1, b: 2}, {b: 2, a: 1}]) // false
 */
export function linearUniqueItems<T extends Ajv>(ajv: T): T {
  ajv.removeKeyword('uniqueItems');
  ajv.addKeyword({
    keyword: 'uniqueItems',
    type: 'array',
    schemaType: 'boolean',
    errors: true,
    validate: uniqueItems,
  });
  return ajv;
}

const uniqueItems: SchemaValidateFunction = (schema: boolean, data: unknown[]) => {
  if (!schema || data.length < 2) return true;
  const pair = duplicatePair(data, current ?? new JsonIds());
  if (!pair) return true;
  const [j, i] = pair;
  uniqueItems.errors = [{ keyword: 'uniqueItems', params: { i, j }, message: `must NOT have duplicate items (items ## ${j} and ${i} are identical)` }];
  return false;
};

/** The first item equal to an earlier one, as [earlier index, its index]; null when all differ. */
function duplicatePair(items: unknown[], ids: JsonIds): [number, number] | null {
  const seen = new Map<number, number>();
  for (let k = 0; k < items.length; k++) {
    const id = ids.of(items[k]);
    const first = seen.get(id);
    if (first !== undefined) return [first, k];
    seen.set(id, k);
  }
  return null;
}

/**
 * The id table of the validation running now (`withJsonIds`), so that an array checked at several levels, or
 * by several `uniqueItems` of one schema (`allOf`, `$ref`), has the id of each array or object holding others
 * worked out once. Per call, not per value: a value changed between two checks is never judged by old ids.
 */
let current: JsonIds | null = null;

/**
 * Runs one validation with its own id table; a `uniqueItems` check outside one uses a table of its own.
 *
 * @example const ok = withJsonIds(() => validate(answer));
 */
export function withJsonIds<T>(run: () => T): T {
  const outer = current;
  current = new JsonIds();
  try {
    return run();
  } finally {
    current = outer;
  }
}

/**
 * Structural ids of JSON values: two values get the same id exactly when they are equal as JSON Schema
 * defines it (numbers by value, so 1 and 1.0 are one; arrays item by item in order; objects by their set of
 * members, whatever the key order). A scalar is its own Map key; an array's or object's key is built from its
 * members' ids (an object's sorted by the name's id), never from their text, and the id of each array or
 * object that holds arrays or objects is remembered: the work is linear in the value however deep it nests,
 * where canonical JSON text per item would copy a nested item again at every level that checks it.
 *
 * @example const ids = new JsonIds(); ids.of({a: 1, b: [2]}) === ids.of({b: [2.0], a: 1}) // true
 */
export class JsonIds {
  private readonly scalars = new Map<unknown, number>();
  private readonly composites = new Map<string, number>();
  private readonly known = new WeakMap<object, number>();
  private next = 0;

  /** Walks with its own stack rather than recursion: an answer nested thousands deep must not overflow. */
  of(value: unknown): number {
    if (value === null || typeof value !== 'object') return this.scalar(value);
    const known = this.known.get(value);
    if (known !== undefined) return known;
    const stack = [openFrame(value)];
    for (;;) {
      const top = stack[stack.length - 1]!;
      if (top.ids.length < top.members.length) {
        const member = top.members[top.ids.length];
        if (member === null || typeof member !== 'object') {
          top.ids.push(this.scalar(member));
          continue;
        }
        top.nested = true;
        const id = this.known.get(member);
        if (id === undefined) stack.push(openFrame(member));
        else top.ids.push(id);
        continue;
      }
      stack.pop();
      const id = this.close(top);
      if (stack.length === 0) return id;
      stack[stack.length - 1]!.ids.push(id);
    }
  }

  /** The id of an array or object whose members' ids are all known. */
  private close(frame: Frame): number {
    let key = '';
    if (!frame.names) {
      key = `[${frame.ids.join(',')}]`;
    } else {
      const pairs = frame.names.map((name, k) => [this.scalar(name), frame.ids[k]!] as const);
      key = `{${pairs
        .sort((a, b) => a[0] - b[0])
        .map(([name, id]) => `${name}:${id}`)
        .join(',')}}`;
    }
    let id = this.composites.get(key);
    if (id === undefined) this.composites.set(key, (id = this.next++));
    // Only values holding arrays or objects are remembered: recomputing one of scalars costs no more than
    // looking it up would, and a WeakMap entry costs more than a Map's.
    if (frame.nested) this.known.set(frame.value, id);
    return id;
  }

  /** Map keys compare by SameValueZero: 0 and -0 are one, 1 and "1" are two. */
  private scalar(value: unknown): number {
    let id = this.scalars.get(value);
    if (id === undefined) this.scalars.set(value, (id = this.next++));
    return id;
  }
}

/** An array or object being walked: its member values, their ids so far, and (objects) the member names. */
interface Frame {
  value: object;
  members: unknown[];
  names: string[] | null;
  ids: number[];
  nested: boolean;
}

function openFrame(value: object): Frame {
  if (Array.isArray(value)) return { value, members: value, names: null, ids: [], nested: false };
  const names = Object.keys(value);
  const record = value as Record<string, unknown>;
  return { value, members: names.map((name) => record[name]), names, ids: [], nested: false };
}
