import Ajv2020, { type ErrorObject, type ValidateFunction } from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { RE2JS } from 're2js';
import { joinPointer, type MappingProblem } from './mapping';

/**
 * The JSON Schemas (draft 2020-12) of synthetic tools: checked against the meta-schema and
 * compiled when saved, compiled once per tool version when run. Ajv with `strict: false`
 * (annotations and unknown keywords are allowed, as the draft allows them); no schema is
 * ever fetched (`$ref` to anything outside the schema does not compile).
 */
const MAX_SCHEMA_BYTES = 64 * 1024;

/**
 * The most pattern matching one validation may do: the characters tested times the size of
 * the compiled pattern (RE2 instructions), summed over every `pattern` and
 * `patternProperties` test. RE2's time is linear in the text but also in the pattern's
 * program: a 553-instruction pattern held the event loop (every tenant's requests) for
 * seconds on a 400 KB argument. Five million is about a hundred milliseconds at worst, and
 * far more than schemas written for tool arguments need (a 10-instruction pattern on 500,000
 * characters).
 */
export const MAX_PATTERN_WORK = 5_000_000;

/** A validation that would do more pattern matching than MAX_PATTERN_WORK: stopped before the test that would pass it. */
export class PatternWorkExceeded extends Error {
  override readonly name = 'PatternWorkExceeded';
}

/** The pattern work left to the validation running now (validations are synchronous, so one at a time); null outside runValidator. */
let patternWorkLeft: number | null = null;

/** A compiled pattern's size in RE2 instructions (re2js keeps its program as `re2Input.prog`); the pattern's length when that is not there. */
function programSize(re: RE2JS, pattern: string): number {
  const prog = (re as unknown as { re2Input?: { prog?: { numInst?: () => number } } }).re2Input?.prog;
  return Math.max(1, typeof prog?.numInst === 'function' ? prog.numInst() : pattern.length);
}

/**
 * `pattern` and `patternProperties` run in RE2 (re2js: time linear in the input), not in
 * JavaScript's backtracking engine: a schema is written by any organization, and a pattern
 * such as `^(a+)+$` would otherwise hold the event loop (every tenant's requests) for hours on
 * a forty-character argument. RE2 has no lookaround or backreferences: a pattern using them
 * does not compile, so the schema is refused when saved. Each test is paid for from the
 * validation's pattern work before it runs.
 */
const linearRegExp = Object.assign(
  (pattern: string, flags: string) => {
    const re = RE2JS.compile(pattern, flags.includes('i') ? RE2JS.CASE_INSENSITIVE : 0);
    const size = programSize(re, pattern);
    return {
      // Ajv shares one compiled pattern among the tests of the same source and flags (its key).
      toString: () => `/${pattern}/${flags}`,
      test(text: string): boolean {
        if (patternWorkLeft !== null) {
          patternWorkLeft -= text.length * size;
          if (patternWorkLeft < 0) throw new PatternWorkExceeded();
        }
        return re.test(text);
      },
    };
  },
  // What Ajv would write into standalone code (never generated here).
  { code: 'require("re2js").RE2JS.compile' },
);

/** JSON text of a value with object members in order: equal JSON values, equal keys. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const obj = value as Record<string, unknown>;
    return `{${Object.keys(obj)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical(obj[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/**
 * `uniqueItems` in time linear in the array (each item's canonical JSON in a map): Ajv's own
 * compares every pair of items that are not all of one scalar type, and 40,000 of them held
 * the event loop for seconds.
 */
function uniqueItems(this: unknown, schema: boolean, data: unknown[]): boolean {
  const self = uniqueItems as typeof uniqueItems & { errors?: Partial<ErrorObject>[] };
  self.errors = [];
  if (!schema) return true;
  const seen = new Map<string, number>();
  for (const [i, item] of data.entries()) {
    const key = canonical(item);
    const j = seen.get(key);
    if (j !== undefined) {
      self.errors = [{ keyword: 'uniqueItems', params: { i, j }, message: `must NOT have duplicate items (items ## ${j} and ${i} are identical)` }];
      return false;
    }
    seen.set(key, i);
  }
  return true;
}

function newAjv(useDefaults = true) {
  const ajv = new Ajv2020({ strict: false, allErrors: true, useDefaults, validateFormats: true, code: { regExp: linearRegExp } });
  addFormats(ajv);
  ajv.removeKeyword('uniqueItems');
  ajv.addKeyword({ keyword: 'uniqueItems', type: 'array', schemaType: 'boolean', errors: true, validate: uniqueItems });
  return ajv;
}

/**
 * Runs a validator within MAX_PATTERN_WORK: its answer, or PatternWorkExceeded (thrown) when
 * the value would need more pattern matching than that.
 */
export function runValidator(validate: ValidateFunction, value: unknown): boolean {
  patternWorkLeft = MAX_PATTERN_WORK;
  try {
    return validate(value);
  } finally {
    patternWorkLeft = null;
  }
}

/**
 * The most subschemas one check may walk with every `$ref` followed where it points. A
 * `$ref` runs its target again wherever it is used, so a schema of a few kilobytes whose
 * definitions each use the previous one twice makes every check take 2^depth steps (28
 * levels, 1.9 KB: three seconds of event loop per call). Counted when saved, and before a
 * stored schema is compiled; a reference back into a schema being expanded (recursion) counts
 * once, as its cost grows with the value, not the schema.
 */
export const MAX_EXPANDED_SUBSCHEMAS = 20_000;

/** Members whose values are data, not subschemas. */
const DATA_KEYWORDS = new Set(['enum', 'const', 'default', 'examples', 'example']);

/**
 * The subschemas a check walks with local references followed, counted up to `cap` + 1 (then
 * it stops); `unresolved` lists references that do not point into the schema by `#`, a JSON
 * pointer (`#/$defs/x`), an anchor (`#name`) or a `$id` of it.
 */
export function expandedSize(schema: unknown, cap = MAX_EXPANDED_SUBSCHEMAS): { count: number; unresolved: string[] } {
  const ids = new Map<string, unknown>();
  const anchors = new Map<string, unknown>();
  const index = (node: unknown, depth: number): void => {
    if (depth > 200 || node === null || typeof node !== 'object') return;
    if (Array.isArray(node)) {
      for (const item of node) index(item, depth + 1);
      return;
    }
    const obj = node as Record<string, unknown>;
    if (typeof obj.$id === 'string') ids.set(obj.$id.replace(/#$/, ''), obj);
    if (typeof obj.$anchor === 'string') anchors.set(obj.$anchor, obj);
    if (typeof obj.$dynamicAnchor === 'string') anchors.set(obj.$dynamicAnchor, obj);
    for (const [k, v] of Object.entries(obj)) if (!DATA_KEYWORDS.has(k)) index(v, depth + 1);
  };
  index(schema, 0);

  const resolve = (ref: string): unknown => {
    const hash = ref.indexOf('#');
    const base = hash < 0 ? ref : ref.slice(0, hash);
    const fragment = hash < 0 ? '' : ref.slice(hash + 1);
    const root = base === '' ? schema : ids.get(base);
    if (root === undefined) return undefined;
    if (fragment === '') return root;
    if (!fragment.startsWith('/')) return anchors.get(fragment);
    let current: unknown = root;
    for (const raw of fragment.slice(1).split('/')) {
      let token: string;
      try {
        token = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
      } catch {
        return undefined;
      }
      if (current === null || typeof current !== 'object' || !Object.prototype.hasOwnProperty.call(current, token)) return undefined;
      current = (current as Record<string, unknown>)[token];
    }
    return current;
  };

  let count = 0;
  const unresolved: string[] = [];
  const expanding = new Set<unknown>();
  const walk = (node: unknown, depth: number): void => {
    if (count > cap || depth > 200 || node === null || typeof node !== 'object') return;
    if (Array.isArray(node)) {
      for (const item of node) walk(item, depth + 1);
      return;
    }
    count += 1;
    const obj = node as Record<string, unknown>;
    for (const [k, v] of Object.entries(obj)) {
      if (DATA_KEYWORDS.has(k)) continue;
      if ((k === '$ref' || k === '$dynamicRef') && typeof v === 'string') {
        const target = resolve(v);
        if (target === undefined) unresolved.push(v);
        else if (!expanding.has(target)) {
          expanding.add(target);
          walk(target, depth + 1);
          expanding.delete(target);
        }
        continue;
      }
      walk(v, depth + 1);
    }
  };
  expanding.add(schema);
  walk(schema, 0);
  return { count, unresolved };
}

/** The problem of a schema whose check would walk more than MAX_EXPANDED_SUBSCHEMAS subschemas, or null. */
function expansionProblem(schema: unknown): string | null {
  const { count, unresolved } = expandedSize(schema);
  if (unresolved.length > 0) return `has a $ref that does not point into the schema ("${unresolved[0]}"): use "#", "#/<pointer>", "#<anchor>" or a $id of it`;
  if (count > MAX_EXPANDED_SUBSCHEMAS)
    return `expands to more than ${MAX_EXPANDED_SUBSCHEMAS} subschemas when its $refs are followed (each use of a $ref checks its target again); use each definition fewer times`;
  return null;
}

/** A stored schema that expands past MAX_EXPANDED_SUBSCHEMAS (saved before the limit): it is not compiled. */
export class SchemaTooComplex extends Error {
  override readonly name = 'SchemaTooComplex';
}

const checker = newAjv();

/** Problems of a schema written at `at`: size, meta-schema, type object, compiles. */
export function schemaProblems(schema: unknown, at: string): MappingProblem[] {
  if (JSON.stringify(schema).length > MAX_SCHEMA_BYTES) return [{ pointer: at, message: 'is larger than 64 KiB' }];
  const declared = (schema as { $schema?: unknown }).$schema;
  if (declared !== undefined && declared !== 'https://json-schema.org/draft/2020-12/schema') {
    return [{ pointer: joinPointer(at, '$schema'), message: 'must be https://json-schema.org/draft/2020-12/schema (or left out): schemas are draft 2020-12' }];
  }
  let valid: boolean;
  try {
    valid = checker.validateSchema(schema as object) as boolean;
  } catch (err) {
    return [{ pointer: at, message: `is not a valid JSON Schema: ${err instanceof Error ? err.message : String(err)}` }];
  }
  if (!valid) {
    return (checker.errors ?? []).slice(0, 10).map((e) => ({ pointer: at + e.instancePath, message: `is not a valid JSON Schema: ${e.message ?? 'invalid'}` }));
  }
  if ((schema as { type?: unknown }).type !== 'object') return [{ pointer: joinPointer(at, 'type'), message: 'must be "object"' }];
  try {
    newAjv().compile(schema as object);
  } catch (err) {
    return [{ pointer: at, message: `does not compile: ${err instanceof Error ? err.message : String(err)}` }];
  }
  // After compiling, which refuses references to anything outside the schema (nothing is fetched).
  const expansion = expansionProblem(schema);
  return expansion ? [{ pointer: at, message: expansion }] : [];
}

const compiled = new Map<string, ValidateFunction>();
const MAX_COMPILED = 500;

/**
 * The validator of a stored schema, compiled once per `key` (tool id, which schema, and its
 * version). `applyDefaults`: fill in the schema's defaults (arguments), or leave the value as
 * it is (the output). Throws SchemaTooComplex for a schema past MAX_EXPANDED_SUBSCHEMAS.
 */
export function validatorFor(key: string, schema: object, applyDefaults = true): ValidateFunction {
  let validate = compiled.get(key);
  if (!validate) {
    const expansion = expansionProblem(schema);
    if (expansion) throw new SchemaTooComplex(`The schema ${expansion}.`);
    validate = newAjv(applyDefaults).compile(schema);
    if (compiled.size >= MAX_COMPILED) compiled.delete(compiled.keys().next().value as string);
    compiled.set(key, validate);
  }
  return validate;
}

/** Ajv's errors as problems under `base` (`/arguments`). */
export function problemsOf(errors: ErrorObject[] | null | undefined, base: string): MappingProblem[] {
  return (errors ?? []).map((e) => {
    const missing = e.keyword === 'required' ? joinPointer('', String((e.params as { missingProperty?: string }).missingProperty ?? '')) : '';
    return { pointer: base + e.instancePath + missing, message: e.message ?? 'is not valid' };
  });
}
