# Writes OUTPUT, a C++ file defining `const char* const NAME` with INPUT's bytes, at build time,
# so that a static page lives in the repository as an .html file and ships inside the binary.
file(READ "${INPUT}" content)
string(FIND "${content}" ")kvlm_embed\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter )kvlm_embed\"")
endif()
file(WRITE "${OUTPUT}" "// Generated from ${INPUT} by cmake/embed_text.cmake; do not edit.\n"
  "namespace kvlm::server { extern const char* const ${NAME}; const char* const ${NAME} = R\"kvlm_embed(${content})kvlm_embed\"; }\n")
