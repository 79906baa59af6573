import { fileParserDefinition } from './stage';

/**
 * `file-parser`: turns the PDF documents of a request into text blocks for models without native PDF
 * support. See stage.ts and the README's "File parser".
 */
export const fileParser = fileParserDefinition();
